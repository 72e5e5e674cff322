import socket, sys, time
port = int(sys.argv[1]); size = int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
val = bytes(range(256)) * (size // 256)
t = time.time()
s.sendall(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$%d\r\n" % size)
mv = memoryview(val)
for i in range(0, size, 1 << 20):
    s.sendall(mv[i:i + (1 << 20)])
s.sendall(b"\r\n")
r = s.recv(100)
dt = time.time() - t
print("SET", r, "%.1f MB/s" % (size / 1e6 / dt))
if not r.startswith(b"+OK") or sys.argv[3:] == ["noget"]:
    sys.exit(0 if r.startswith(b"+OK") else 1)
s.sendall(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n")
hdr = b""
while not hdr.endswith(b"\r\n"):
    hdr += s.recv(1)
n = int(hdr[1:-2]); got = bytearray(n + 2); view = memoryview(got); k = 0
while k < n + 2:
    k += s.recv_into(view[k:])
print("GET", n, got[:n] == val)
