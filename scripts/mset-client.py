# One MSET of N pairs ("key:%06d" -> "value-%d"), timed from the first byte sent to the reply;
# then DBSIZE. Usage: python3 scripts/mset-client.py PORT [N] [rounds]
import socket, sys, time
port = int(sys.argv[1]); n = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
parts = [b"*%d\r\n$4\r\nMSET\r\n" % (1 + 2 * n)]
for i in range(n):
    k = b"key:%06d" % i; v = b"value-%d" % i
    parts.append(b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v))
req = b"".join(parts)
s = socket.create_connection(("127.0.0.1", port))
def reply():
    d = b""
    while not d.endswith(b"\r\n"): d += s.recv(4096)
    return d
times = []
for r in range(rounds):
    t = time.time(); s.sendall(req); rep = reply(); times.append((time.time() - t) * 1e3)
    assert rep == b"+OK\r\n", rep
s.sendall(b"*1\r\n$6\r\nDBSIZE\r\n")
print("MSET of %d pairs (%d B): %s ms; DBSIZE %s" % (n, len(req), " ".join("%.0f" % t for t in times), reply().strip()))
