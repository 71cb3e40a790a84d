#!/bin/bash
# usage: alt.sh ROUNDS OUTDIR variant... ; variant = name:binary[:ENV=VAL]
rounds=$1; out=$2; shift 2
mkdir -p $out
for r in $(seq 1 $rounds); do
  for v in "$@"; do
    IFS=: read name bin envs <<< "$v"
    echo "== round $r $name $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)" >> $out/log
    env $envs $bin --systems smbq-quic,smbq-tcp-enc --size-mib ${SIZE:-256} --reps 1 --max-udp-payload 1452 --dir /dev/shm > $out/$name.$r.txt 2>&1
    grep -A3 "^system  " $out/$name.$r.txt | head -4 >> $out/log
    grep -A4 "CPU ns/packet" $out/$name.$r.txt | tail -3 >> $out/log
  done
done
