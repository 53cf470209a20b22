#!/usr/bin/env python3
"""Greedy generation from a Hugging Face causal LM directory: `bigbatch generate --top-k 1` with
its KV cache and with --no-kv-cache, against transformers' model.generate(do_sample=False) with
and without its cache, interleaved. Checks that all four continue the prompt with the same text,
and prints the median new tokens per second of each (docs/PRETRAINED.md).

bigbatch's time per token is (wall time of N new tokens - wall time of 0) / N, so that starting
the process and loading the model are left out; transformers' is the generate() call alone. Both
on the same threads (2 unless --threads). Run with the wheel's Python:

    ~/.cache/bigbatch/torch-2.15.0/bin/python bench/generate_speed.py build/bigbatch \\
        ~/.cache/bigbatch/bench-llama-384x6-v512 --new 400 --reps 3
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch
import transformers


def bigbatch_seconds(binary, model, prompt, new, cached, threads):
    command = [binary, "generate", model, "--prompt", prompt, "--max-new-bytes", str(new),
               "--top-k", "1"] + ([] if cached else ["--no-kv-cache"])
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - start, result.stdout[:-1]  # without print's newline


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary")
    parser.add_argument("model")
    parser.add_argument("--prompt", default="Once upon a time")
    parser.add_argument("--new", type=int, default=400, help="new tokens")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.eval()
    ids = tokenizer(args.prompt, return_tensors="pt").input_ids
    # Only max_new_tokens and EOS end it, as bigbatch's (no min_length, repetition penalty, ...).
    settings = dict(do_sample=False, max_new_tokens=args.new, min_new_tokens=0,
                    eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)

    per_token = {name: [] for name in ("bigbatch cached", "bigbatch --no-kv-cache",
                                       "transformers cached", "transformers use_cache=False")}
    texts = {}
    new_tokens = None
    for _ in range(args.reps):
        for cached in (True, False):
            name = "bigbatch cached" if cached else "bigbatch --no-kv-cache"
            base, _ = bigbatch_seconds(args.binary, args.model, args.prompt, 0, cached,
                                       args.threads)
            seconds, text = bigbatch_seconds(args.binary, args.model, args.prompt, args.new,
                                             cached, args.threads)
            texts[name] = text
            per_token[name].append((seconds - base) / args.new)
        for cached in (True, False):
            name = "transformers cached" if cached else "transformers use_cache=False"
            with torch.no_grad():
                start = time.perf_counter()
                out = model.generate(ids, use_cache=cached, **settings)
                seconds = time.perf_counter() - start
            new_ids = out[0, ids.shape[1]:]
            new_tokens = len(new_ids)
            texts[name] = args.prompt + tokenizer.decode(new_ids)
            per_token[name].append(seconds / new_tokens)

    print(f"{args.model}: {new_tokens} new tokens of at most {args.new}, greedy, "
          f"{args.threads} threads, {args.reps} interleaved repetitions")
    if new_tokens != args.new:
        print("note: EOS came first; bigbatch's per-token time divides by --new all the same")
    reference = texts["transformers cached"]
    for name, times in per_token.items():
        same = "same text" if texts[name] == reference else "TEXT DIFFERS"
        print(f"  {name:30s} {1 / statistics.median(times):8.1f} tokens/s "
              f"(median of {', '.join(f'{1 / t:.1f}' for t in times)})  {same}")
    return 0 if all(text == reference for text in texts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
