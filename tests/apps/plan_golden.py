#!/usr/bin/python3
"""`poseidon plan` of each case below prints exactly the reviewed file in tests/golden/plan/.

The fp32 cases were written by the build before protocol.gradient_wire reached `plan` (their
output must not change by a byte); the fp16/bf16 cases price pushes, factors and ring steps at 2
bytes a value and pulls at 4, as the simulator does, and name the wire in the header. Regenerate
(and review the diff) with --update.

  plan_golden.py --poseidon build/apps/poseidon/poseidon [--update]
"""
import argparse
import os
import subprocess
import sys

from golden import check_goldens

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "plan")
ALEXNET = "scenarios/experiments/paper2015_alexnet.yaml"
DEMO = "scenarios/demo.yaml"
BERT = "scenarios/experiments/bert_base_4w.yaml"
DDP = "scenarios/experiments/ddp_v100_25g.yaml"
HYBRID = "scenarios/experiments/hybrid_v100_25g.yaml"

# name -> (scenario, --set overrides)
CASES = {
    "alexnet": (ALEXNET, []),
    "alexnet_paper": (ALEXNET, ["protocol.scheme=paper"]),
    "demo_dedicated_3_shards": (DEMO, ["cluster.placement=dedicated", "cluster.servers=3"]),
    "bert_base_4w": (BERT, []),
    "alexnet_paper_fp16": (ALEXNET, ["protocol.scheme=paper", "protocol.gradient_wire=fp16"]),
    "alexnet_bf16": (ALEXNET, ["protocol.gradient_wire=bf16"]),
    "demo_dedicated_3_shards_fp16": (DEMO, ["cluster.placement=dedicated", "cluster.servers=3",
                                            "protocol.gradient_wire=fp16"]),
    # A baseline: every layer allreduce, DDP's buckets with NCCL's price of ring and tree and the
    # algorithm each runs (allreduce_algorithm auto: NCCL's choice, core/nccl_tuning.h).
    "ddp_resnet50_8x8_v100_auto": (HYBRID, ["cluster.client=device", "protocol.scheme=null",
                                            "protocol.baseline=ddp",
                                            "protocol.allreduce_algorithm=auto"]),
    "ddp_cifar10_quick_32_auto": (DDP, ["model=cifar10_quick", "batch_per_worker=50",
                                        "cluster.machines=32", "protocol.allreduce_algorithm=auto"]),
    "horovod_resnet50_8": (DDP, ["protocol.baseline=horovod"]),
}


def plan(poseidon, scenario, overrides):
    cmd = [poseidon, "plan", scenario]
    for o in overrides:
        cmd += ["--set", o]
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    if out.stderr:
        raise SystemExit("%s: unexpected stderr: %s" % (" ".join(cmd), out.stderr))
    return out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--poseidon", required=True)
    ap.add_argument("--update", action="store_true")
    a = ap.parse_args()
    cases = {name: ("poseidon plan " + scenario + "".join(" --set " + o for o in overrides),
                    lambda s=scenario, o=overrides: plan(a.poseidon, s, o))
             for name, (scenario, overrides) in CASES.items()}
    return check_goldens(GOLDEN, cases, a.update, "plans")


if __name__ == "__main__":
    sys.exit(main())
