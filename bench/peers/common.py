"""What the trainer peers share: the sample stream, the data set over it, and the window clock.

Each trainer gets exactly bench/peer.py's micro-batches, in its order: the windows' sample
indices (data_order.WindowSampler: bigbatch's windows, as peer.py's loop draws them) are drawn
before the trainer is made, concatenated into one stream, and served in order by StreamDataset
through a sequential sampler, one micro-batch per __getitems__ call (peer.py's data.get: one
gather per micro-batch).
"""
import time

import torch

import peer


def window_count(job):
    """The windows a trainer runs: the timed ones, and one more, profiled, unless --no-memory."""
    return job.args.steps + (0 if job.args.no_memory else 1)


def window_stream(job):
    """The sample indices of window_count(job) windows, in the order peer.py trains on them. The
    trainers count accumulation in micro-batches, so every window must be a full one: a run that
    would reach an epoch's short last window stops with an error instead."""
    windows = [job.windows.next() for _ in range(window_count(job))]
    for number, window in enumerate(windows, 1):
        if window.numel() < job.args.global_batch:
            raise SystemExit(f"peer.py --loop {job.args.loop}: window {number} is an epoch's "
                             f"last, of {window.numel()} samples, not {job.args.global_batch}: "
                             f"the trainers run full windows only (use fewer --steps)")
    return torch.cat(windows)


def pass_through(batch):
    """The collate_fn: StreamDataset.__getitems__ returns the micro-batch already batched."""
    return batch


def inputs_and_labels(inputs, labels):
    """A micro-batch as the trainers' loops below read it."""
    return {"inputs": inputs, "labels": labels}


class StreamDataset(torch.utils.data.Dataset):
    """Position i is the i-th sample of `stream` (peer.py's order); a DataLoader with a sequential
    sampler and batch_size micro_batch reads a micro-batch per __getitems__ call (torch's
    DataLoader fetches a batch with it where a data set has it), as batch_of(inputs, labels)
    makes it: {"inputs", "labels"} by default."""

    def __init__(self, data, stream, batch_of=inputs_and_labels):
        self.data, self.stream, self.batch_of = data, stream, batch_of

    def __len__(self):
        return self.stream.numel()

    def __getitems__(self, positions):
        inputs, labels, _ = self.data.get(self.stream[torch.as_tensor(positions)])
        return self.batch_of(inputs, labels)

    def __getitem__(self, position):
        return self.__getitems__([position])


class WindowClock:
    """peer.py's records for a trainer that runs the windows itself: window n's time is from the
    end of window n - 1 (start() for the first) to its end, perf_counter marks taken in the
    trainer's hooks, so each window holds all the trainer does in a step (its data loading, its
    own per-step work). After --steps windows, the one more of window_count is run under
    peer.MemoryProfile, not timed; peak RSS is read before it, as peer.py does."""

    def __init__(self, job, stream):
        self.job, self.stream = job, stream
        self.done, self.rss, self.peak, self.profile = 0, None, 0, None

    def start(self):
        self.mark = time.perf_counter()

    def window_done(self, loss):
        """At the end of a window (after its optimizer and scheduler step), with its loss (the
        sum of its micro-batches' contributions: the window's mean)."""
        now = time.perf_counter()
        self.done += 1
        args = self.job.args
        if self.done <= args.steps:
            self.job.emit(peer.window_record(self.job, self.done, loss, now - self.mark))
        elif self.profile is not None:
            self.peak, self.profile = self.profile.stop(), None
        if self.done == args.steps:
            self.rss = peer.peak_rss_bytes()
            if not args.no_memory:
                self.profile = peer.MemoryProfile(self.job, not_counted=[self.stream])
                self.profile.start()
        self.mark = time.perf_counter()  # the records and the profiler's start are not timed

    def summary(self, **extra):
        if self.done != window_count(self.job):
            raise SystemExit(f"peer.py --loop {self.job.args.loop}: the trainer ran "
                             f"{self.done} windows, not {window_count(self.job)}")
        rss = self.rss if self.rss is not None else peer.peak_rss_bytes()
        self.job.emit(peer.cpu_summary(self.job, self.peak, rss, **extra))
