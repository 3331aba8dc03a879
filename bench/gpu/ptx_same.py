#!/usr/bin/env python3
# ptx_same.py: whether the kernels of one build's PTX are the same operations as another's, kernel
# by kernel (register numbers, label numbers, local-depot and the kernels' own symbol names
# canonicalised; a kernel that gained a template parameter with a default, e.g. the kv storage
# type, is matched to its old name). Used for issue 28.3: the kv=f32 instantiations of the
# attention kernels must compile to what the kernels compiled to before the key existed.
#   for f in attention attention_unfused digest; do
#     nvcc -D_GNU_SOURCE -Ibackends/cuda -Icore/include -Imodel/include -O3 -DNDEBUG -arch=compute_90 \
#          -std=c++17 -ptx backends/cuda/$f.cu -o OLD_OR_NEW/$f.ptx; done   # at both commits
#   bench/gpu/ptx_same.py OLD NEW attention attention_unfused digest
# Prints per file how many old kernels have an identical new one; DIFF / NO MATCH lines otherwise.
import re, subprocess, sys
def entries(path):
    s=open(path).read()
    out={}
    for m in re.finditer(r'\.entry (\S+)\(', s):
        name=m.group(1)
        start=m.start()
        # body ends at next "\n}\n"
        end=s.index('\n}\n', start)+3
        body=re.sub(r'\$L__BB\d+_', 'L_', s[start:end].replace(name,'FN'))
        body=re.sub(r'__local_depot\d+','DEPOT',body)
        body=re.sub(r'_ZZ\w+?E(\d+[A-Za-z_]\w*)',r'LOCALSTATIC_\1',body)  # a kernel's static shared arrays
        body='\n'.join(l for l in body.split('\n') if not l.strip().startswith('.reg'))
        seen={}
        def canon(m):
            k=m.group(0)
            if k not in seen: seen[k]='%'+m.group(1)+'_'+str(len(seen))
            return seen[k]
        body=re.sub(r'%(rs|rd|r|fd|f|p)(\d+)\b',canon,body)
        out[name]=body
    return out
def demangle(ns):
    r=subprocess.run(['c++filt'],input='\n'.join(ns),capture_output=True,text=True).stdout.split('\n')
    return dict(zip(ns,r))
for f in sys.argv[3:]:
    a=entries(f'{sys.argv[1]}/{f}.ptx'); b=entries(f'{sys.argv[2]}/{f}.ptx')
    da=demangle(list(a)); db=demangle(list(b))
    bn={db[k]:k for k in b}
    ok=0
    for k in a:
        d=da[k]
        cands=[d, re.sub(r'>\(', ', float>(', d, count=1), d.replace('(float const*, float*','(unsigned int const*, float*' ),
               re.sub(r'>\(', ', false>(', d, count=1)]  # a trailing bool template parameter defaulting to false
        # templates with defaults: add float as last template arg
        found=None
        for c in cands:
            if c in bn: found=bn[c]; break
        if not found:
            # try generic: match by same name with extra ', float' before the first '>('
            for nb,kb in bn.items():
                if nb.replace(', float>','>').replace('<float>','')==d or nb.replace(', float>','>')==d.replace('float const*','unsigned int const*'):
                    found=kb;break
        if not found:
            base = d.split('(')[0]
            for nb, kb in bn.items():
                if nb.startswith('void ' + base + '<float>(') and re.sub(r'[A-Za-z0-9_]*' + base + r'[A-Za-z0-9_]*', 'SELF', b[kb]) == re.sub(r'[A-Za-z0-9_]*' + base + r'[A-Za-z0-9_]*', 'SELF', a[k]):
                    found = kb
                    break
        if not found:
            print('NO MATCH', d); continue
        if a[k]!=b[found]:
            print('DIFF', d, '->', db[found])
        else: ok+=1
    print(f, 'old kernels with an identical new one:', ok, 'of', len(a), '; new file has', len(b))
