#!/usr/bin/env python3
"""check_html.py FILE.html: checks a memra report page; exit 0 when every check passes, 1 with the
reasons on stdout otherwise (2: usage).

  - the HTML's tags balance (html.parser; void elements aside), one <html>, <head>, <body>;
  - every <svg>...</svg> part is well-formed XML (xml.dom.minidom), and at least --min-svg of them;
  - no script, no external reference: no <script>, <link>, <iframe>, <object>, <embed>, <img>, no
    src= attribute, no href= other than a fragment (#...), no "://" anywhere, no url( or @import
    in the style;
  - --expect TEXT (repeatable): TEXT appears in the page's text.
"""
import html.parser
import re
import sys
import xml.dom.minidom

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
FORBIDDEN_TAGS = {"script", "link", "iframe", "object", "embed", "img", "frame", "audio", "video", "base", "image",
                  "use", "foreignobject"}


class Balance(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.counts, self.text = [], [], {}, []

    def handle_starttag(self, tag, attrs):
        in_svg = any(t == "svg" for t, _ in self.stack)
        self.counts[tag if not in_svg else "svg:" + tag] = self.counts.get(tag if not in_svg else "svg:" + tag, 0) + 1
        if tag in FORBIDDEN_TAGS:
            self.errors.append("forbidden element <%s> at line %d" % (tag, self.getpos()[0]))
        for k, v in attrs:
            if k == "src" or k == "xlink:href":
                self.errors.append("attribute %s=%r at line %d" % (k, v, self.getpos()[0]))
            if k == "href" and not (v or "").startswith("#"):
                self.errors.append("external href=%r at line %d" % (v, self.getpos()[0]))
            if k.startswith("on"):
                self.errors.append("event handler %s at line %d" % (k, self.getpos()[0]))
        if tag not in VOID:
            self.stack.append((tag, self.getpos()[0]))

    def handle_startendtag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1
        if tag in FORBIDDEN_TAGS:
            self.errors.append("forbidden element <%s/> at line %d" % (tag, self.getpos()[0]))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack:
            self.errors.append("</%s> at line %d closes nothing" % (tag, self.getpos()[0]))
            return
        top, line = self.stack.pop()
        if top != tag:
            self.errors.append("</%s> at line %d closes <%s> of line %d" % (tag, self.getpos()[0], top, line))

    def handle_data(self, data):
        self.text.append(data)


def check(page, min_svg, expects):
    errors = []
    p = Balance()
    p.feed(page)
    p.close()
    errors += p.errors
    for tag, line in p.stack:
        errors.append("<%s> of line %d is never closed" % (tag, line))
    for tag in ("html", "head", "body", "title"):
        if p.counts.get(tag, 0) != 1:
            errors.append("%d <%s> elements, expected 1" % (p.counts.get(tag, 0), tag))
    if not page.lstrip().lower().startswith("<!doctype html>"):
        errors.append("no <!DOCTYPE html> first")
    svgs = re.findall(r"<svg\b.*?</svg>", page, flags=re.S)
    if len(re.findall(r"<svg\b", page)) != len(svgs):
        errors.append("an <svg> without its </svg>")
    for i, s in enumerate(svgs):
        try:
            xml.dom.minidom.parseString(s.encode("utf-8"))
        except Exception as e:  # ExpatError and friends
            errors.append("svg %d is not well-formed XML: %s" % (i + 1, e))
    if len(svgs) < min_svg:
        errors.append("%d svg charts, expected at least %d" % (len(svgs), min_svg))
    for bad in ("://", "url(", "@import", "<script", "javascript:"):
        if bad in page.lower():
            errors.append("the page holds %r (an external reference or a script)" % bad)
    text = html.unescape("".join(p.text))
    for e in expects:
        if e not in text:
            errors.append("the page's text lacks %r" % e)
    return errors


def main(argv):
    args, min_svg, expects = [], 0, []
    i = 1
    while i < len(argv):
        if argv[i] == "--min-svg":
            min_svg = int(argv[i + 1])
            i += 2
        elif argv[i] == "--expect":
            expects.append(argv[i + 1])
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if len(args) != 1:
        print("usage: check_html.py FILE.html [--min-svg N] [--expect TEXT]...")
        return 2
    with open(args[0], encoding="utf-8") as f:
        page = f.read()
    errors = check(page, min_svg, expects)
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
