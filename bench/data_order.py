"""bigbatch's sample order, reproduced in Python for the peers and the correctness harness.

data::epoch_permutation (src/bigbatch/data/shuffle.cpp) is a Fisher-Yates shuffle driven by
std::mt19937_64, whose output the C++ standard fixes, with an unbiased rejection draw; and
engine::WindowSampler (src/bigbatch/engine/window_sampler.cpp) cuts a fresh permutation per epoch
into windows of global_batch indices. Both are copied here bit for bit, so that a Python loop can
train on exactly the windows `bigbatch train` draws for the same train.seed.
"""
import torch


def mt19937_64(seed):
    """std::mt19937_64's output stream for `seed` (the C++ standard's parameters)."""
    n, m, mask = 312, 156, (1 << 64) - 1
    state = [seed & mask]
    for i in range(1, n):
        state.append((6364136223846793005 * (state[-1] ^ (state[-1] >> 62)) + i) & mask)
    index = n
    while True:
        if index == n:
            for i in range(n):
                x = (state[i] & 0xFFFFFFFF80000000) | (state[(i + 1) % n] & 0x7FFFFFFF)
                state[i] = state[(i + m) % n] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
            index = 0
        y = state[index]
        index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        yield y & mask


def epoch_permutation(n, seed, epoch):
    """bigbatch's data::epoch_permutation: the order of [0, n) in epoch `epoch` (a list)."""
    draws = mt19937_64(seed ^ ((0x9E3779B97F4A7C15 * (epoch + 1)) & ((1 << 64) - 1)))
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        bound = i + 1
        threshold = ((1 << 64) - bound) % bound
        raw = next(draws)
        while raw < threshold:
            raw = next(draws)
        j = raw % bound
        order[i], order[j] = order[j], order[i]
    return order


class WindowSampler:
    """engine::WindowSampler: windows of global_batch sample indices (int64 tensors) from a fresh
    epoch_permutation every epoch; the last window of an epoch holds what is left. `order` is the
    current epoch's permutation (a tensor)."""

    def __init__(self, size, global_batch, seed):
        if size < 1 or global_batch < 1:
            raise ValueError(f"WindowSampler of {size} samples, global batch {global_batch}")
        self.size, self.global_batch, self.seed = size, global_batch, seed
        self.epoch, self.cursor = 0, 0
        self.order = torch.tensor(epoch_permutation(size, seed, 0), dtype=torch.int64)

    def next(self):
        if self.cursor == self.size:
            self.epoch, self.cursor = self.epoch + 1, 0
            self.order = torch.tensor(epoch_permutation(self.size, self.seed, self.epoch),
                                      dtype=torch.int64)
        take = min(self.global_batch, self.size - self.cursor)
        window = self.order[self.cursor:self.cursor + take]
        self.cursor += take
        return window
