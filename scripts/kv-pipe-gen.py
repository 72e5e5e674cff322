#!/usr/bin/env python3
# RESP for redis-cli --pipe: N SETs of key:<n> (14 B) to v<n> (16 B), then one hash of H fields in HSETs of 100.
# usage: scripts/kv-pipe-gen.py N H > file; redis-cli -p PORT --pipe < file
import sys
# RESP commands: N string keys of 16 B values, and one hash of H fields
n=int(sys.argv[1]); h=int(sys.argv[2])
out=sys.stdout.buffer
def cmd(*a):
    s=b"*%d\r\n"%len(a)
    for x in a: s+=b"$%d\r\n%s\r\n"%(len(x),x)
    return s
buf=[]
for i in range(n):
    buf.append(cmd(b"SET", b"key:%010d"%i, b"v%015d"%i))
    if len(buf)>=10000: out.write(b"".join(buf)); buf=[]
for i in range(0,h,100):
    args=[b"HSET",b"bighash"]
    for j in range(i,min(h,i+100)): args+= [b"f%09d"%j, b"value-%09d"%j]
    buf.append(cmd(*args))
    if len(buf)>=1000: out.write(b"".join(buf)); buf=[]
out.write(b"".join(buf))
