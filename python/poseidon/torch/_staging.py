"""Gradients of CUDA parameters, staged into pinned host memory for Poseidon's network path.

Poseidon's PS, SFB and ring steps leave from host memory over TCP, so a CUDA gradient crosses to
the host first, without stopping the backward pass: the hook that finds a module's gradients
ready makes a side stream wait for the stream autograd computed them on (torch.cuda's
current stream), copies them there into pinned buffers (non_blocking, allocated once per
parameter), records an event and marks the gradients used by that stream (so that the caching
allocator does not reuse their memory before the copy); a background thread waits for the event
and only then reports the module to the core. The backward pass's end waits for every report.

CUDA here is staged, not GPUDirect: one device-to-host copy per gradient and one host-to-device
copy of the mean gradient, each on its own stream. Untested on a GPU in this project's CI (its
machines have none, and Debian's PyTorch is CPU-only): scripts/gpu-check runs the GPU test when
PyTorch has CUDA.
"""

import queue
import threading

import torch


class CudaStaging:
    def __init__(self, report):
        """report(entry_index, clock, host_grads, factors, rows): what to call once a module's
        gradients are on the host (from the staging thread)."""
        self._report = report
        self._stream = torch.cuda.Stream()
        self._pinned = {}  # id(param) -> pinned host buffer
        self._queue = queue.Queue()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="poseidon-staging", daemon=True)
        self._thread.start()

    def host_buffer(self, p):
        """The pinned host buffer of `p`'s gradient (BSP: the mean lands there)."""
        return self._pinned[id(p)]

    def _buffer(self, p):
        buf = self._pinned.get(id(p))
        if buf is None:
            buf = torch.empty(p.shape, dtype=p.dtype, device="cpu", pin_memory=True)
            self._pinned[id(p)] = buf
        return buf

    def stage(self, index, clock, params_and_grads, factors, rows):
        """Copies the gradients of one module (device tensors) to the host on the side stream;
        the report follows once the copy ended."""
        current = torch.cuda.current_stream()
        self._stream.wait_stream(current)
        host = []
        with torch.cuda.stream(self._stream):
            for p, g in params_and_grads:
                buf = self._buffer(p)
                buf.copy_(g, non_blocking=True)
                g.record_stream(self._stream)
                host.append(buf)
            done = torch.cuda.Event()
            done.record(self._stream)
        self._queue.put((index, clock, host, factors, rows, done))

    def _run(self):
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                index, clock, host, factors, rows, done = item
                done.synchronize()
                self._report(index, clock, host, factors, rows)
            except Exception as e:  # noqa: BLE001 (kept for the training thread to raise)
                self._error = e
            finally:
                self._queue.task_done()

    def flush(self):
        """Waits until every staged module was reported; raises what a report raised."""
        self._queue.join()
        if self._error is not None:
            e, self._error = self._error, None
            raise e

    def close(self):
        self._queue.put(None)
        self._thread.join(timeout=5)
