#!/usr/bin/env bash
# scenarios/cluster/sweep_slurm.sh submitted for real, from another folder: the merged CSV is the
# whole sweep's, byte for byte; with one shard failing, the merge job fails (no hang) and says which.
. "$(dirname "$0")/lib.sh"
need_slurm
sweep=$root/tests/golden/small_sweep.yaml
"$bin" sweep "$sweep" -o "$work/whole.csv" -j 1
cd "$work"
timeout 300 "$root/scenarios/cluster/sweep_slurm.sh" --wait "$sweep" out/merged.csv 3 ||
  fail "sweep_slurm.sh --wait failed (rc $?)"
cmp "$work/out/merged.csv" "$work/whole.csv" || fail "merged CSV differs from the whole sweep's"
echo "3 shards merged byte for byte"

# Shard 1 fails: the array ends, the merge runs (afterany) and fails naming shard 1.
cat >"$work/fail-shard-1" <<WRAP
#!/usr/bin/env bash
for a in "\$@"; do [[ \$a == 1/3 && " \$* " != *" --check "* ]] && { echo "shard 1 fails on purpose" >&2; exit 1; }; done
exec "$bin" "\$@"
WRAP
chmod +x "$work/fail-shard-1"
rc=0
POSEIDON=$work/fail-shard-1 timeout 300 "$root/scenarios/cluster/sweep_slurm.sh" --wait "$sweep" \
  bad/merged.csv 3 >"$work/bad.out" 2>&1 || rc=$?
cat "$work/bad.out"
((rc != 0 && rc != 124)) || fail "with a failed shard: rc $rc (want the merge's failure, not 0 or a timeout)"
[[ ! -e $work/bad/merged.csv ]] || fail "a merged CSV was written although shard 1 failed"
grep -q "shard 1/3 of 'small-sweep' is missing" "$work"/bad/merged.shards/slurm-merge-*.log ||
  fail "the merge log does not name the missing shard"
# Checked before submitting: a sweep that does not load submits nothing.
printf 'schema_version: 1\nbase: %s\nvary:\n  cluster.workers: [2, banana]\n' "$root/tests/golden/small.yaml" >"$work/bad.yaml"
rc=0
"$root/scenarios/cluster/sweep_slurm.sh" "$work/bad.yaml" "$work/none/x.csv" 2 >"$work/check.out" 2>&1 || rc=$?
cat "$work/check.out"
((rc == 2)) || fail "a sweep that does not load: rc $rc, want 2"
grep -q "bad.yaml:4:24: error: workers: expected an integer" "$work/check.out" || fail "no located error"
grep -q "submitted" "$work/check.out" && fail "submitted a sweep that does not load"
echo "ok"
