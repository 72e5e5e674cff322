# Sourced by the kv cluster scripts. start_cluster BIN DIR PEER RESP HTTP: three `pmwire kv
# --cluster` members on fresh 256 MiB pools in DIR, peers on 127.0.0.1:PEER1..3, RESP on
# RESP1..3, HTTP on HTTP1..3 (each a port prefix, the member's id appended); sets PIDS and
# LEADER (the member whose ROLE is master, empty if none within 20 s).
start_cluster() {
  local b=$1 d=$2 peer=$3 resp=$4 http=$5 i extra
  local cl=1=127.0.0.1:${peer}1,2=127.0.0.1:${peer}2,3=127.0.0.1:${peer}3
  PIDS=()
  for i in 1 2 3; do
    extra=(); [ $i = 1 ] && extra=(--create-secret)
    setsid "$b" kv --pool "$d/p$i" --size 256M --resp 127.0.0.1:$resp$i --http 127.0.0.1:$http$i --cluster $cl --id $i --secret-file "$d/secret" "${extra[@]}" >"$d/log$i" 2>&1 & PIDS+=($!)
    [ $i = 1 ] && while [ ! -f "$d/secret" ]; do sleep 0.05; done
  done
  LEADER=""
  for _ in $(seq 200); do
    for i in 1 2 3; do redis-cli -p $resp$i ROLE 2>/dev/null | head -1 | grep -q master && LEADER=$i; done
    [ -n "$LEADER" ] && return 0; sleep 0.1
  done
}
