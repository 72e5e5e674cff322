#!/usr/bin/env python3
import socket,sys
# Loads NKEYS SETs (14 B keys, 16 B values) and one hash of HFIELDS fields through PORT, 500 commands a round trip;
# a batch answered with an error (a leader change) is sent again (SET and HSET are idempotent), 20 times at most.
# usage: scripts/kv-load.py PORT NKEYS HFIELDS
port=int(sys.argv[1]); n=int(sys.argv[2]); h=int(sys.argv[3])
def cmd(*a):
    s=b"*%d\r\n"%len(a)
    for x in a: s+=b"$%d\r\n%s\r\n"%(len(x),x)
    return s
s=socket.create_connection(("127.0.0.1",port))
import time
def batch(cmds, tries=20):
    s.sendall(b"".join(cmds)); want=len(cmds); got=b""
    while got.count(b"\r\n")<want:
        got+=s.recv(1<<20)
    if got.startswith(b"-") or b"\r\n-" in got:
        assert tries > 0, got[:200]
        time.sleep(0.5); batch(cmds, tries-1)
B=500
for i in range(0,n,B):
    batch([cmd(b"SET", b"key:%010d"%j, b"v%015d"%j) for j in range(i,min(n,i+B))])
for i in range(0,h,100*B):
    cmds=[]
    for k in range(i,min(h,i+100*B),100):
        args=[b"HSET",b"bighash"]
        for j in range(k,min(h,k+100)): args+=[b"f%09d"%j, b"value-%09d"%j]
        cmds.append(cmd(*args))
    batch(cmds)
