#!/usr/bin/env bash
# bench_collectives refuses a bad flag with one line naming it and exit code 2, and refuses the
# flags that would do nothing for the implementation asked for (--bind and --spin-us under
# mpi, --ring-slice without the ring, --stream-copy-min under mpi) instead of ignoring them.
set -u
bin="$1"
fail=0
expect() {  # expect "what the message must contain" args...
  local want="$1"; shift
  local out rc
  out=$("$bin" "$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" -ne 2 ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: bench_collectives $* -> exit $rc, stderr: $(head -1 <<<"$out") (wanted exit 2 and '$want')"
    fail=1
  fi
}
expect "--spin-us takes microseconds" --impl local --spin-us abc
expect "--spin-us takes microseconds" --impl local --spin-us -5
expect "--spin-us takes microseconds" --impl local --spin-us 1e9
expect "--ring-slice takes a byte count" --impl ring --ring-slice 1.5
expect "--eager-limit takes a byte count" --impl local --eager-limit -1
expect "--ring-slice needs --impl ring" --impl local --ring-slice 4096
expect "--bind and --spin-us are for rank threads" --impl mpi --bind
expect "--bind and --spin-us are for rank threads" --impl mpi --spin-us 10
expect "--stream-copy-min takes a byte count" --impl local --stream-copy-min 16M
expect "--stream-copy-min sets our copies" --impl mpi --stream-copy-min 0
expect "--max-bytes takes a byte count" --impl local --max-bytes 64K
expect "unknown flag --probe" --probe extra
[ "$fail" = 0 ] && echo "bench_collectives: 12 bad invocations, each refused with exit 2"
exit "$fail"
