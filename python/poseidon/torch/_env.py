"""poseidon.torch.init(): this process as a worker of a live Poseidon job.

Where the job is and which worker this process is comes from the environment, in this order:

- `poseidon launch --torch` (and `poseidon node ... -- CMD` under srun or mpirun) sets
  POSEIDON_SCENARIO, POSEIDON_RANK (the job's rank: 1..P for workers), POSEIDON_COORDINATOR
  (HOST:PORT), POSEIDON_SECRET_FILE, POSEIDON_JOB_ID and optionally POSEIDON_SET (scenario
  overrides, one KEY=VALUE per line), POSEIDON_TRACE_DIR, POSEIDON_DECISIONS_DIR,
  POSEIDON_LISTEN / POSEIDON_ADVERTISE (this host's address for its peers);
- torchrun (RANK, WORLD_SIZE), Slurm (SLURM_PROCID) or Open MPI (OMPI_COMM_WORLD_RANK) give the
  worker index when POSEIDON_RANK is absent (rank = index + 1); POSEIDON_COORDINATOR and the
  secret must still say where the job's coordinator and shards are (`poseidon launch --torch
  --no-workers` starts them and prints what to export).

It also sets torchrun's variables when they are missing (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE), so that a DistributedSampler built without arguments reads its shard of the
data after init(): DistributedSampler(ds, num_replicas=pt.size(), rank=pt.rank()) is the explicit
form.
"""

import os
import sys

_session = None
_info = {}
_model = None  # the DistributedDataParallel of this process's job


class ConfigError(ValueError):
    """The environment does not describe a worker of a Poseidon job."""


def _env_int(name):
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ConfigError(f"{name}={v!r} is not an integer") from None


def _worker_index():
    rank = _env_int("POSEIDON_RANK")
    if rank is not None:
        return rank - 1, "POSEIDON_RANK"
    for name in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        v = _env_int(name)
        if v is not None:
            return v, name
    raise ConfigError(
        "poseidon.torch.init(): this process is not a worker of a Poseidon job: no POSEIDON_RANK "
        "(set by `poseidon launch --torch -- python train.py`), RANK (torchrun), SLURM_PROCID or "
        "OMPI_COMM_WORLD_RANK in the environment; start the script with `poseidon launch --torch "
        "SCENARIO -- python train.py` (docs/torch.md)")


def _required(name, what):
    v = os.environ.get(name)
    if not v:
        raise ConfigError(f"poseidon.torch.init(): {name} is not set ({what}); `poseidon launch "
                          "--torch` sets it, or export what `poseidon launch --torch --no-workers` "
                          "prints (docs/torch.md)")
    return v


def init(*, rendezvous_timeout=120, progress_timeout=600):
    """Joins the job this process is a worker of (see the module's doc for the environment) and
    returns its worker index (0-based, as torch.distributed's rank). Idempotent. The connections
    are made in the background; the first collective step (DistributedDataParallel's
    construction) waits for them. Raises ConfigError when the environment names no job."""
    global _session
    if _session is not None:
        return _info["index"]
    index, source = _worker_index()
    scenario = _required("POSEIDON_SCENARIO", "the job's scenario file")
    coordinator = _required("POSEIDON_COORDINATOR", "the coordinator's HOST:PORT")
    host, _, port = coordinator.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"POSEIDON_COORDINATOR={coordinator!r}: expected HOST:PORT")
    secret = _required("POSEIDON_SECRET_FILE", "the job's secret file")
    overrides = [l for l in os.environ.get("POSEIDON_SET", "").splitlines() if l.strip()]
    rank = index + 1
    trace_dir = os.environ.get("POSEIDON_TRACE_DIR", "")
    decisions_dir = os.environ.get("POSEIDON_DECISIONS_DIR", "")
    for d in (trace_dir, decisions_dir):
        if d:
            os.makedirs(d, exist_ok=True)
    from .. import _torch  # the C++ half; imported here so that `import poseidon.torch` is cheap
    listen = os.environ.get("POSEIDON_LISTEN", "127.0.0.1")
    _session = _torch.Session(
        scenario, overrides, rank, host, int(port), secret,
        os.environ.get("POSEIDON_JOB_ID", ""), listen, os.environ.get("POSEIDON_ADVERTISE", ""),
        os.path.join(trace_dir, f"rank-{rank}.json") if trace_dir else "",
        os.path.join(decisions_dir, f"rank-{rank}.txt") if decisions_dir else "",
        os.environ.get("POSEIDON_TLS_DIR", ""), int(rendezvous_timeout), int(progress_timeout))
    size = _session.workers
    if index >= size:
        raise ConfigError(f"{source} says this is worker {index}, but the job has {size} workers")
    _info.update(index=index, size=size, source=source)
    _exit_with_the_jobs_code(_torch.JobError)
    # torchrun's variables for code that reads them (DistributedSampler, torch.distributed users).
    os.environ.setdefault("RANK", str(index))
    os.environ.setdefault("WORLD_SIZE", str(size))
    os.environ.setdefault("LOCAL_RANK", os.environ.get("POSEIDON_LOCAL_RANK", str(index)))
    os.environ.setdefault("LOCAL_WORLD_SIZE", os.environ.get("POSEIDON_LOCAL_SIZE", str(size)))
    return index


def _exit_with_the_jobs_code(job_error):
    """A script that dies of a JobError (the job failed elsewhere: a lost peer, a refusal) exits
    with the job's code (3: a lost peer) rather than Python's 1, so that `poseidon launch` waits
    for, and names, the process that caused it."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        if isinstance(value, job_error):
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(getattr(value, "code", 3) or 3)

    sys.excepthook = hook


def session():
    """The job's session; init() first if this process has not joined yet."""
    if _session is None:
        init()
    return _session


def rank():
    """This worker's index, 0..size()-1 (torch.distributed's rank)."""
    session()
    return _info["index"]


def size():
    """The job's number of workers (torch.distributed's world size)."""
    session()
    return _info["size"]


def initialized():
    return _session is not None


def model():
    return _model


def set_model(m):
    global _model
    _model = m


def _forget():
    """The session ended (shutdown): a later init() joins another job."""
    global _session, _model
    _session = None
    _model = None
    _info.clear()
