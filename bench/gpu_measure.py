#!/usr/bin/env python3
"""bigbatch on a CUDA GPU: the measurements of scripts/gpu-check (its step e) and its report.

    bench/gpu_measure.py run --bigbatch build-gpu/bigbatch --corpus DIR --deadline EPOCH ...
    bench/gpu_measure.py report --out gpu-results --work /tmp/bigbatch-gpu-check ...

`run` trains one GPT (8 layers, width 512, 8 heads, context 256; global batch 64 sequences, so
16,384 tokens per optimizer step) in several configurations, in order of importance:

- the micro-batch: 2, 4, 8, 16 and 64 (the big batch at once), fp32: the seed articles claim that
  peak memory falls about linearly with the micro-batch and that accumulating costs little time;
- activation checkpointing (gpt.checkpointing = "blocks") at micro-batch 8: memory saved, time;
- model.precision fp32, bf16, fp16 (with bigbatch's dynamic loss scaler) at micro-batch 8;
- the same model and loop in PyTorch eager on the GPU (bench/peer.py --device cuda), fp32 at
  micro-batch 8, then bf16 and fp16 if time is left; and micro_batch = "auto" under a budget.

Both sides start from the same weights (bench/peer.py --save-initial, then model.init_from and
--init-from) and draw bigbatch's windows, so the report compares their first windows' losses.

Every run trains for about --run-seconds of windows: bigbatch gets SIGINT once its metrics.jsonl
has held windows for that long, and stops at the next window boundary (its stop signal), the PyTorch
side stops itself (--max-seconds). When the deadline is near, the runs get shorter (down to
--min-seconds), then the last ones are skipped, and the records say so. Throughput is read from
the runs' own window records: total tokens over total step seconds of the windows after the
first WARMUP ones. Peak memory is the highest window peak_bytes: the CUDA caching allocator's
allocated bytes, reset at every window on both sides.

`report` turns the measurements, the facts, the step times and the test log into results.json
(every number with its run's settings) and results.md (tables for docs/GPU.md). Standard library
only: it runs before and without torch.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time

MODEL = {"layers": 8, "embed": 512, "heads": 8, "context": 256}
GLOBAL_BATCH = 64
WARMUP = 5          # first windows left out of the throughput (set-up, allocator growth, clocks)
MAX_STEPS = 100000  # never reached: the runs are stopped by time
REFERENCE_MB = 8    # the micro-batch of the checkpointing, precision and PyTorch comparisons
AUTO_BUDGET = "2GiB"


class Run:
    """One configuration: side "bigbatch" or "pytorch"; core runs share the time first."""

    def __init__(self, name, side, micro_batch, precision="fp32", checkpointing="none",
                 core=True, budget=None):
        self.name, self.side, self.micro_batch = name, side, micro_batch
        self.precision, self.checkpointing, self.core, self.budget = (
            precision, checkpointing, core, budget)

    def settings(self):
        s = dict(MODEL, global_batch=GLOBAL_BATCH, micro_batch=self.micro_batch,
                 precision=self.precision, checkpointing=self.checkpointing, side=self.side,
                 device="cuda")
        if self.budget:
            s["memory_budget"] = self.budget
        return s


RUNS = [
    Run("bigbatch-mb8-fp32", "bigbatch", 8),
    Run("bigbatch-mb64-fp32", "bigbatch", 64),
    Run("bigbatch-mb2-fp32", "bigbatch", 2),
    Run("pytorch-mb8-fp32", "pytorch", 8),
    Run("bigbatch-mb8-fp32-checkpointing", "bigbatch", 8, checkpointing="blocks"),
    Run("bigbatch-mb8-bf16", "bigbatch", 8, "bf16"),
    Run("bigbatch-mb8-fp16", "bigbatch", 8, "fp16"),
    Run("bigbatch-mb16-fp32", "bigbatch", 16),
    Run("bigbatch-mb4-fp32", "bigbatch", 4),
    Run("pytorch-mb8-bf16", "pytorch", 8, "bf16", core=False),
    Run("pytorch-mb8-fp16", "pytorch", 8, "fp16", core=False),
    Run("bigbatch-auto-fp32-budget", "bigbatch", "auto", core=False, budget=AUTO_BUDGET),
]


# --- running ---------------------------------------------------------------------------------------

def bigbatch_command(args, run, run_dir):
    sets = [f"train.device=cuda", "model.kind=gpt", f"gpt.layers={MODEL['layers']}",
            f"gpt.embed={MODEL['embed']}", f"gpt.heads={MODEL['heads']}",
            f"gpt.context={MODEL['context']}", f"batch.global_batch={GLOBAL_BATCH}",
            f"batch.micro_batch={run.micro_batch}", f"model.precision={run.precision}",
            f"gpt.checkpointing={run.checkpointing}", f"data.path={args.corpus}",
            f"train.steps={MAX_STEPS}", "train.eval_every=0", "train.eval_samples=64",
            "train.log_every=50", "sample.bytes=0", "checkpoint.every=0"]
    if run.budget:
        sets.append(f"memory.budget={run.budget}")
    if args.initial:
        sets.append(f"model.init_from={args.initial}")
    command = [args.bigbatch, "train"]
    for s in sets:
        command += ["-s", s]
    return command + ["--run-dir", run_dir]


def peer_model(args):
    """bench/peer.py and the arguments of MODEL on the corpus."""
    return [args.python, os.path.join(args.repo, "bench", "peer.py"), "--model", "gpt",
            "--gpt-layers", str(MODEL["layers"]), "--gpt-embed", str(MODEL["embed"]),
            "--gpt-heads", str(MODEL["heads"]), "--gpt-context", str(MODEL["context"]),
            "--data", args.corpus]


def peer_command(args, run, out, seconds):
    initial = ["--init-from", args.initial] if args.initial else []
    return [*peer_model(args), "--device", "cuda", *initial, "--global-batch", str(GLOBAL_BATCH),
            "--micro-batch", str(run.micro_batch), "--precision", run.precision,
            "--steps", str(MAX_STEPS), "--max-seconds", f"{seconds:g}", "--out", out]


def make_initial_weights(args, env, log):
    """The weights both sides start from: the PyTorch side's seeded initialisation of MODEL
    (bench/peer.py --save-initial, on the CPU) in the work directory. bigbatch starts from it with
    model.init_from and PyTorch with --init-from; both draw bigbatch's windows, so their first
    windows' losses can be compared. Returns (the file or None, what the records say). A failure
    leaves each side its own weights: the throughput runs go on."""
    path = os.path.join(args.work, "initial.safetensors")
    command = [*peer_model(args), "--save-initial", path]
    shown = shlex.join(command).replace(args.repo.rstrip("/") + "/", "")
    if args.dry_run:
        print(f"# the initial weights of both sides\n+ {shown}")
        return path, f"both sides from {path}"
    log.write(f"\n===== initial weights: {shown}\n")
    log.flush()
    if os.path.exists(path):
        os.remove(path)  # an earlier run's
    try:
        code = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                              timeout=300).returncode
    except subprocess.TimeoutExpired:
        code = "a timeout of 300 s"
    except OSError as error:
        code = str(error)
    if code != 0 or not os.path.exists(path):
        return None, f"each side from its own weights: `{shown}` failed ({code}; runs.log)"
    return path, f"both sides from {path} (`{shown}`)"


def read_records(path):
    """The complete JSON lines of `path` (a line being written is left for later)."""
    records = []
    try:
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return records


def supervise(command, env, log, records_path, seconds, hard_end, stop_by_signal):
    """Runs `command`; once `records_path` has held window records for `seconds`, sends SIGINT
    (when stop_by_signal). Kills it at `hard_end`. Returns (exit code, wall seconds, how it
    ended)."""
    start = time.time()
    child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    first_window = interrupted = None
    ended = "exited on its own"
    while child.poll() is None:
        time.sleep(0.25)
        now = time.time()
        if first_window is None and any(r.get("type") == "window"
                                        for r in read_records(records_path)):
            first_window = now
        if stop_by_signal and interrupted is None and first_window is not None \
                and now - first_window >= seconds:
            child.send_signal(signal.SIGINT)
            interrupted, ended = now, f"SIGINT after {now - first_window:.1f} s of windows"
        if now >= hard_end or (interrupted is not None and now - interrupted > 30):
            child.kill()
            ended = "killed at the time limit"
            break
    code = child.wait()
    return code, time.time() - start, ended


def windows_of(side, records):
    """[(tokens, samples, seconds, peak_bytes, skipped)] of a run's window records."""
    out = []
    for r in records:
        if r.get("type") != "window" or not r.get("step_seconds"):
            continue
        seconds = r["step_seconds"]
        if side == "bigbatch":
            out.append((r.get("tokens", 0), r.get("samples", 0), seconds,
                        r.get("peak_bytes", 0), bool(r.get("skipped"))))
        else:
            out.append((round(r["tokens_per_second"] * seconds),
                        round(r["samples_per_second"] * seconds), seconds,
                        r.get("peak_bytes", 0), False))
    return out


def throughput(windows):
    """The numbers of a run from its windows: the first WARMUP are dropped (the first half when
    fewer than 2 x WARMUP were recorded)."""
    drop = WARMUP if len(windows) >= 2 * WARMUP else len(windows) // 2
    timed = windows[drop:]
    seconds = sum(w[2] for w in timed)
    return {
        "windows": len(windows), "warmup_windows_dropped": drop, "timed_windows": len(timed),
        "timed_seconds": seconds, "trained_seconds": sum(w[2] for w in windows),
        "tokens_per_second": sum(w[0] for w in timed) / seconds if seconds else None,
        "samples_per_second": sum(w[1] for w in timed) / seconds if seconds else None,
        "median_step_seconds": statistics.median(w[2] for w in timed) if timed else None,
        "peak_bytes": max((w[3] for w in windows), default=None),
        "skipped_windows": sum(w[4] for w in windows),
    }


def make_corpus(args):
    """The corpus: the carried fortunes, else the repository's own text files (docs, sources)."""
    if os.path.isdir(args.corpus) and os.listdir(args.corpus):
        return args.corpus, "Debian's fortunes (carried in .gpu-deps)"
    path = os.path.join(args.work, "corpus.txt")
    if not args.dry_run:
        with open(path, "wb") as out:
            for top in ("docs", "src", "python", "bench", "tests"):
                for folder, _, names in sorted(os.walk(os.path.join(args.repo, top))):
                    for name in sorted(names):
                        if name.endswith((".md", ".cpp", ".h", ".py", ".txt")):
                            with open(os.path.join(folder, name), "rb") as f:
                                out.write(f.read())
    return path, f"the repository's text files concatenated ({args.corpus} was missing)"


def run_all(args):
    if not args.dry_run:
        os.makedirs(args.work, exist_ok=True)
    args.corpus, corpus_note = make_corpus(args)
    have_bigbatch = os.access(args.bigbatch, os.X_OK)
    env = dict(os.environ)
    bigbatch_env = dict(env)
    if args.ld_library_path:
        bigbatch_env["LD_LIBRARY_PATH"] = args.ld_library_path + (
            ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    results = {"corpus": args.corpus, "corpus_note": corpus_note, "runs": [],
               "run_seconds": args.run_seconds, "warmup_windows": WARMUP,
               "model": MODEL, "global_batch": GLOBAL_BATCH}
    overheads = []  # wall seconds of a run beyond its windows: start-up, the stop, checkpoint
    log = sys.stdout if args.dry_run else open(args.log, "a")
    args.initial, results["initial_weights"] = make_initial_weights(args, env, log)
    for index, run in enumerate(RUNS):
        entry = {"name": run.name, "settings": run.settings()}
        results["runs"].append(entry)
        if run.side == "bigbatch" and not have_bigbatch and not args.dry_run:
            entry["status"] = f"skipped: no bigbatch binary at {args.bigbatch}"
            continue
        # The time left is shared by the core runs still to come; when that share falls under
        # the floor, this run gets the floor and the last runs are the ones dropped.
        left = args.deadline - time.time()
        overhead = statistics.mean(overheads) if overheads else 12.0
        core_left = sum(1 for r in RUNS[index:] if r.core) if run.core else 1
        floor = min(args.min_seconds, args.run_seconds)
        seconds = max(floor, min(args.run_seconds, left / core_left - overhead))
        if left < floor + overhead and not args.dry_run:
            entry["status"] = (f"skipped: out of time ({left:.0f} s left before the deadline, "
                               f"{overhead:.0f} s of start-up and stop per run)")
            print(f"{run.name}: {entry['status']}", flush=True)
            continue
        seconds = args.run_seconds if args.dry_run else seconds
        run_dir = os.path.join(args.work, run.name)
        if run.side == "bigbatch":
            command = bigbatch_command(args, run, run_dir)
            records_path = os.path.join(run_dir, "metrics.jsonl")
            run_env, by_signal = bigbatch_env, True
            shown = (f"LD_LIBRARY_PATH={args.ld_library_path} " if args.ld_library_path else "") \
                + shlex.join(command)
            how = f"stopped with SIGINT after about {seconds:.0f} s of windows"
        else:
            records_path = os.path.join(args.work, run.name + ".jsonl")
            command = peer_command(args, run, records_path, round(seconds, 1))
            run_env, by_signal = env, False
            shown, how = shlex.join(command), "stops itself (--max-seconds)"
        shown = shown.replace(args.repo.rstrip("/") + "/", "")  # as run from the repository
        entry.update(command=shown, run_seconds=round(seconds, 1), stop=how)
        if args.dry_run:
            print(f"# {run.name} ({how})\n+ {shown}")
            continue
        print(f"{run.name}: {seconds:.1f} s of windows ({left:.0f} s left)", flush=True)
        log.write(f"\n===== {run.name}: {shown}\n")
        log.flush()
        hard_end = min(args.deadline, time.time() + seconds + overhead + 60)
        code, wall, ended = supervise(command, run_env, log, records_path, seconds, hard_end,
                                      by_signal)
        records = read_records(records_path)
        numbers = throughput(windows_of(run.side, records))
        entry.update(numbers, exit_code=code, wall_seconds=round(wall, 1), ended=ended,
                     first_losses=[r["loss"] for r in records if r.get("type") == "window"][:2])
        overheads.append(max(0.0, wall - numbers["trained_seconds"]))
        if run.side == "bigbatch":
            summary = os.path.join(run_dir, "summary.json")
            if os.path.exists(summary):
                entry["summary"] = {k: v for k, v in json.load(open(summary)).items()
                                    if k != "sample"}
            last = [r for r in records if r.get("type") == "window"][-1:]
            if last:  # what the run ended with (a stopped run writes no summary.json)
                entry["micro_batch_used"] = last[0].get("micro_batch")
                entry["final_loss_scale"] = last[0].get("loss_scale")
            subprocess.run(["rm", "-rf", os.path.join(run_dir, "checkpoints")])
        else:
            summaries = [r for r in records if r.get("type") == "summary"]
            if summaries:
                entry["summary"] = summaries[-1]
                entry["final_loss_scale"] = summaries[-1].get("final_loss_scale")
                if not numbers["peak_bytes"]:  # a CPU peer: its profiled window's peak
                    entry["peak_bytes"] = summaries[-1].get("peak_bytes")
        # bigbatch exits 130 after SIGINT (128 + the signal): that is the planned stop.
        planned = code == 0 or (run.side == "bigbatch" and ended.startswith("SIGINT")
                                and code == 128 + signal.SIGINT)
        entry["status"] = "ok" if planned and numbers["timed_windows"] else \
            f"failed (exit code {code}, {ended}, {numbers['windows']} windows)"
        log.write(f"===== {run.name}: exit code {code}, {ended}, {numbers['windows']} windows, "
                  f"{wall:.1f} s wall\n")
        log.flush()
        rate = numbers["tokens_per_second"]
        peak = numbers["peak_bytes"]
        print(f"{run.name}: {entry['status']}; "
              f"{'%.0f tokens/s' % rate if rate else 'no throughput'}, "
              f"peak {'%.1f MiB' % (peak / 2**20) if peak else '?'}, {wall:.1f} s wall",
              flush=True)
        with open(args.json, "w") as f:  # after every run: a later kill keeps the earlier ones
            json.dump(results, f, indent=1)
    if not args.dry_run:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    # The step fails (and says so in the steps table) when no run measured anything.
    return 0 if args.dry_run or any(r.get("status") == "ok" for r in results["runs"]) else 1


# --- the report ------------------------------------------------------------------------------------

def mib(n):
    return f"{n / 2**20:,.1f} MiB" if n else "n/a"


def rate(n):
    return f"{n:,.0f}" if n else "n/a"


def ratio(a, b, digits=2):
    return f"{a / b:.{digits}f}x" if a and b else "n/a"


def read_facts(path):
    facts = {"gpu": {}, "torch": {}, "lines": {}}
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return facts
    for line in text.splitlines():
        if line.startswith("GPU_FACTS "):
            fields = [f.strip() for f in line[len("GPU_FACTS "):].split(",")]
            keys = ["name", "driver", "memory", "compute_capability", "max_sm_clock",
                    "power_limit"]
            if len(fields) >= 2 and "failed" not in line.lower() and "not found" not in line:
                facts["gpu"] = dict(zip(keys, fields))
        elif line.startswith("TORCH_FACTS "):
            try:
                facts["torch"] = json.loads(line[len("TORCH_FACTS "):])
            except ValueError:
                pass
    patterns = {"gxx": r"^g\+\+ .*$", "cmake": r"^cmake version .*$",
                "nvcc": r"^Cuda compilation tools.*$", "os": r"^(Ubuntu|Debian) .*$",
                "kernel": r"^Linux \S+ \S+$", "nproc": r"^\d+$", "git": r"^git: .*$"}
    for key, pattern in patterns.items():
        found = re.search(pattern, text, re.M)
        if found:
            facts["lines"][key] = found.group(0)
    return facts


def read_steps(path):
    steps = []
    try:
        for line in open(path):
            name, status, code, seconds, log, note = (line.rstrip("\n").split("\t") + [""] * 6)[:6]
            steps.append({"step": name, "status": status, "exit_code": code,
                          "seconds": float(seconds or 0), "log": log, "note": note})
    except OSError:
        pass
    return steps


def read_tests(path):
    tests, summary = [], None
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return {"tests": [], "summary": "no tests.log"}
    for m in re.finditer(r"^\s*\d+/\d+ Test\s+#\d+: (\S+) \.*\s*(\*{3})?(\w[\w ]*?)\s+[\d.]+ sec",
                         text, re.M):
        tests.append({"test": m.group(1), "result": m.group(3).strip()})
    found = re.search(r"^\d+% tests passed.*$", text, re.M)
    if found:
        summary = found.group(0)
    skipped = re.findall(r"no GPU present: [^\n\"]*", text)
    return {"tests": tests, "summary": summary or "no ctest summary in tests.log",
            "skip_reasons": sorted(set(skipped))}


def linear_fit(points):
    """Least squares peak = a + b * micro_batch: (a, b, the largest relative deviation)."""
    if len(points) < 2:
        return None
    xs, ys = zip(*points)
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if not sxx:
        return None
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    a = my - b * mx
    worst = max(abs(a + b * x - y) / y for x, y in points)
    return a, b, worst


def report(args):
    facts = read_facts(os.path.join(args.out, "facts.log"))
    steps = read_steps(os.path.join(args.work, "steps.tsv"))
    tests = read_tests(os.path.join(args.out, "tests.log"))
    try:
        measured = json.load(open(os.path.join(args.work, "measurements.json")))
    except (OSError, ValueError):
        measured = {"runs": [], "note": "no measurements.json: the measure step wrote nothing"}
    try:
        warnings = sum("warning:" in line for line in open(os.path.join(args.out, "build.log"),
                                                            errors="replace"))
    except OSError:
        warnings = None
    now = datetime.datetime.now(datetime.timezone.utc)
    total = time.time() - args.started if args.started else None
    runs = {r["name"]: r for r in measured.get("runs", [])}
    ok = {n: r for n, r in runs.items() if r.get("status") == "ok"}
    gpu, torch_facts = facts["gpu"], facts["torch"]
    results = {"date": now.strftime("%Y-%m-%d"), "time_utc": now.strftime("%H:%M:%SZ"),
               "gpu": gpu, "torch": torch_facts, "machine": facts["lines"], "steps": steps,
               "total_seconds": round(total, 1) if total else None, "budget_seconds": args.budget,
               "build_warnings": warnings, "tests": tests, "method": {
                   "model": measured.get("model", MODEL),
                   "global_batch": measured.get("global_batch", GLOBAL_BATCH),
                   "corpus": measured.get("corpus"), "corpus_note": measured.get("corpus_note"),
                   "warmup_windows_dropped": measured.get("warmup_windows", WARMUP),
                   "run_seconds": measured.get("run_seconds"),
                   "tokens_per_second": "sum of tokens / sum of step_seconds over the windows "
                                        "after the warm-up ones",
                   "peak_bytes": "highest window peak_bytes (CUDA caching allocator, allocated "
                                 "bytes, reset every window)"},
               "runs": measured.get("runs", [])}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)

    md = []
    add = md.append
    gpu_name = gpu.get("name", "no GPU found by nvidia-smi")
    add(f"# gpu-check: bigbatch on {gpu_name}\n")
    add(f"Measured {results['date']} ({results['time_utc']} UTC) by `scripts/gpu-check`.\n")
    add("| | |\n|---|---|")
    add(f"| GPU | {gpu_name}, {gpu.get('memory', '?')}, compute capability "
        f"{gpu.get('compute_capability', '?')}, max SM clock {gpu.get('max_sm_clock', '?')}, "
        f"power limit {gpu.get('power_limit', '?')} |")
    add(f"| driver | {gpu.get('driver', '?')} |")
    add(f"| torch | {torch_facts.get('torch', '?')} (CUDA {torch_facts.get('torch_cuda', '?')}, "
        f"cuDNN {torch_facts.get('cudnn', '?')}), Python {torch_facts.get('python', '?')}; "
        f"`torch.cuda.is_available()` {torch_facts.get('cuda_available', '?')}; matmul TF32 "
        f"{'on' if torch_facts.get('matmul_allow_tf32') else 'off'} (the default) |")
    for key, label in (("nproc", "cores"), ("os", "system"), ("gxx", "compiler"),
                       ("nvcc", "nvcc"), ("cmake", "CMake"), ("git", "source")):
        if key in facts["lines"]:
            add(f"| {label} | {facts['lines'][key]} |")
    add(f"| build warnings | {warnings if warnings is not None else '?'} (-Werror off on the "
        f"GPU machine) |")
    add("")
    add("## Steps\n")
    add("| step | status | seconds | log | note |\n|---|---|---|---|---|")
    for s in steps:
        add(f"| {s['step']} | {s['status']} | {s['seconds']:.0f} | {s['log']} | {s['note']} |")
    if total:
        add(f"\nTotal {total:.0f} s of the {args.budget} s budget.")
    add("\n## GPU tests (`ctest -L gpu`)\n")
    if tests["tests"]:
        add("| test | result |\n|---|---|")
        for t in tests["tests"]:
            add(f"| {t['test']} | {t['result']} |")
    add(f"\n{tests['summary']}")
    for reason in tests.get("skip_reasons", []):
        add(f"\nSkipped: {reason}")

    method = results["method"]
    add("\n## What was measured, and how\n")
    add(f"A GPT of {MODEL['layers']} layers, width {MODEL['embed']}, {MODEL['heads']} heads and "
        f"context {MODEL['context']} (byte-level, vocabulary 256), AdamW, fp32 weights, on "
        f"{method['corpus_note'] or '?'}; every run has the global batch of {GLOBAL_BATCH} "
        f"sequences ({GLOBAL_BATCH * MODEL['context']:,} tokens per optimizer step), split into "
        "micro-batches as the tables say, with `-s train.device=cuda`.")
    lengths = [r["run_seconds"] for r in measured.get("runs", []) if r.get("run_seconds")]
    span = (f"{min(lengths):g} to {max(lengths):g}" if lengths and min(lengths) != max(lengths)
            else f"{lengths[0]:g}" if lengths else "?")
    add(f"Each run trains for about {span} s of windows (up to {method['run_seconds']} s; less "
        "when the build left less time): bigbatch is then sent SIGINT and stops at the next "
        "window boundary, PyTorch stops itself (`--max-seconds`).")
    add(f"tokens/s: the tokens of the timed windows over their summed step seconds, from the "
        f"runs' own records (bigbatch's metrics.jsonl, peer.py's JSON lines); the first "
        f"{method['warmup_windows_dropped']} windows of each run (cuBLAS and allocator set-up, "
        "clocks rising) are left out, or the first half of a run with fewer than "
        f"{2 * method['warmup_windows_dropped']}.")
    add("Peak memory: the highest window peak of the CUDA caching allocator's allocated bytes "
        "(reset at every window, on both sides): weights, gradients, AdamW's moments and one "
        "window's activations; not the allocator's reserved (cached) memory.")

    def row_numbers(name):
        r = ok.get(name)
        return (r.get("peak_bytes"), r.get("tokens_per_second"), r) if r else (None, None, None)

    add("\n## Micro-batch: memory and time (fp32)\n")
    add("| micro-batch | micro-batches per step | peak memory | of micro-batch 64's | tokens/s "
        "| of micro-batch 64's | timed windows |\n|---|---|---|---|---|---|---|")
    big_peak, big_rate, _ = row_numbers("bigbatch-mb64-fp32")
    points = []
    for mb in (2, 4, 8, 16, 64):
        peak, tps, r = row_numbers(f"bigbatch-mb{mb}-fp32")
        if r is None:
            add(f"| {mb} | {GLOBAL_BATCH // mb} | {status_of(runs, f'bigbatch-mb{mb}-fp32')} "
                "| | | | |")
            continue
        points.append((mb, peak))
        add(f"| {mb} | {GLOBAL_BATCH // mb} | {mib(peak)} | "
            f"{pct(peak, big_peak)} | {rate(tps)} | {pct(tps, big_rate)} | "
            f"{r['timed_windows']} |")
    fit = linear_fit(points)
    if fit:
        a, b, worst = fit
        add(f"\nLeast-squares line over these {len(points)} runs: peak = {mib(a)} + "
            f"{mib(b)} per sample of the micro-batch (the fixed part: weights, gradients, "
            f"AdamW's moments; the rest: activations); the largest deviation from it is "
            f"{100 * worst:.1f}% of a run's peak.")
        results["micro_batch_fit"] = {"fixed_bytes": a, "bytes_per_sample": b,
                                      "largest_relative_deviation": worst}

    add(f"\n## Activation checkpointing (micro-batch {REFERENCE_MB}, fp32)\n")
    add("| gpt.checkpointing | peak memory | tokens/s |\n|---|---|---|")
    plain = row_numbers(f"bigbatch-mb{REFERENCE_MB}-fp32")
    ckpt = row_numbers(f"bigbatch-mb{REFERENCE_MB}-fp32-checkpointing")
    add(f"| none | {mib(plain[0]) if plain[2] else status_of(runs, 'bigbatch-mb8-fp32')} | "
        f"{rate(plain[1])} |")
    add(f"| blocks | {mib(ckpt[0]) if ckpt[2] else status_of(runs, 'bigbatch-mb8-fp32-checkpointing')}"
        f" | {rate(ckpt[1])} |")
    if plain[2] and ckpt[2]:
        add(f"\nMemory saved: {mib(plain[0] - ckpt[0])} ({pct(plain[0] - ckpt[0], plain[0])} of "
            f"the peak); time cost: {pct(plain[1] - ckpt[1], plain[1])} fewer tokens/s.")

    add(f"\n## Precision (micro-batch {REFERENCE_MB})\n")
    add("| model.precision | peak memory | tokens/s | of fp32's | skipped windows | final loss "
        "scale |\n|---|---|---|---|---|---|")
    for p in ("fp32", "bf16", "fp16"):
        name = f"bigbatch-mb{REFERENCE_MB}-{p}"
        peak, tps, r = row_numbers(name)
        if r is None:
            add(f"| {p} | {status_of(runs, name)} | | | | |")
            continue
        scale = r.get("final_loss_scale") or (r.get("summary") or {}).get("final_loss_scale")
        add(f"| {p} | {mib(peak)} | {rate(tps)} | {pct(tps, plain[1])} | "
            f"{r['skipped_windows']} | {scale if scale else '-'} |")

    add(f"\n## bigbatch and PyTorch eager (micro-batch {REFERENCE_MB})\n")
    add("The same model, data, AdamW, clipping and schedule in Python (bench/peer.py --device "
        "cuda: the standard accumulation loop, fused causal attention, autocast on CUDA, fp16 "
        "with torch.amp.GradScaler once per window).\n")
    add(f"Weights: {measured.get('initial_weights', 'each side from its own weights')}. Both "
        "sides draw bigbatch's windows; the last column is the largest relative difference of "
        "their first two windows' losses.\n")
    add("| precision | bigbatch tokens/s | PyTorch tokens/s | bigbatch / PyTorch | bigbatch peak "
        "| PyTorch peak | first losses, difference |\n|---|---|---|---|---|---|---|")
    for p in ("fp32", "bf16", "fp16"):
        b, t = row_numbers(f"bigbatch-mb{REFERENCE_MB}-{p}"), row_numbers(
            f"pytorch-mb{REFERENCE_MB}-{p}")
        if b[2] is None and t[2] is None:
            continue
        add(f"| {p} | {rate(b[1]) if b[2] else status_of(runs, f'bigbatch-mb8-{p}')} | "
            f"{rate(t[1]) if t[2] else status_of(runs, f'pytorch-mb8-{p}')} | "
            f"{ratio(b[1], t[1])} | {mib(b[0])} | {mib(t[0])} | "
            f"{loss_difference(b[2], t[2])} |")

    auto = runs.get("bigbatch-auto-fp32-budget")
    if auto and auto.get("status") == "ok":
        add(f"\n## micro_batch = \"auto\" under memory.budget = {AUTO_BUDGET}\n")
        add(f"It trained with micro-batch {auto.get('micro_batch_used', '?')}: peak "
            f"{mib(auto.get('peak_bytes'))}, {rate(auto.get('tokens_per_second'))} tokens/s.")

    not_run = [r for r in measured.get("runs", []) if r.get("status") != "ok"]
    if not_run or measured.get("note"):
        add("\n## Not measured\n")
        if measured.get("note"):
            add(f"- {measured['note']}")
        for r in not_run:
            add(f"- {r['name']}: {r.get('status', 'not started (the measure step stopped)')}")

    add("\n## Commands\n")
    add("From the repository root, after scripts/gpu-check's build and unpacking (bigbatch with "
        "LD_LIBRARY_PATH on the unpacked libraries). `train.steps` is never reached: each run is "
        "stopped after its time, as above. Every command is in results.json.\n")
    shown = [r for r in measured.get("runs", []) if r.get("command")]
    for side in ("bigbatch", "pytorch"):
        mine = [r for r in shown if r["settings"]["side"] == side]
        if not mine:
            continue
        split = [split_command(r["command"]) for r in mine]
        common = [pair for pair in split[0][1] if pair[0] not in ("--run-dir", "--out")
                  and all(pair in other[1] for other in split[1:])]
        words = list(split[0][0])
        for flag, value in common:
            words += [flag] + ([value] if value is not None else [])
        for flag, placeholder in (("--run-dir", "RUN_DIR"), ("--out", "RUN.jsonl")):
            if any(flag == f for f, _ in split[0][1]):
                words += [flag, placeholder]
        add(f"{'bigbatch' if side == 'bigbatch' else 'PyTorch (bench/peer.py)'}, what every "
            f"run sets:\n\n```sh\n{shlex.join(words)}\n```\n")
        add("| run | and its own settings | seconds of windows | status |\n|---|---|---|---|")
        for r, (_, pairs) in zip(mine, split):
            own = " ".join(f"{flag} {value}" if value is not None else flag
                           for flag, value in pairs
                           if (flag, value) not in common and flag not in ("--run-dir", "--out"))
            add(f"| {r['name']} | `{own}` | {r.get('run_seconds', '?')} | "
                f"{r.get('status', '?')} |")
        add("")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"report: {args.out}/results.md and results.json ({len(ok)} of "
          f"{len(measured.get('runs', []))} runs measured)")


def split_command(command):
    """(the words before the first option, [(option, value or None)]) of a shell command."""
    words = shlex.split(command)
    at = next((k for k, w in enumerate(words) if w.startswith("-")), len(words))
    prefix, pairs = words[:at], []
    while at < len(words):
        if at + 1 < len(words) and not words[at + 1].startswith("-"):
            pairs.append((words[at], words[at + 1]))
            at += 2
        else:
            pairs.append((words[at], None))
            at += 1
    return prefix, pairs


def loss_difference(a, b):
    """The largest relative difference of two runs' first window losses, as text ("-" where a
    run has none)."""
    pairs = list(zip((a or {}).get("first_losses") or [], (b or {}).get("first_losses") or []))
    if not pairs:
        return "-"
    return f"{max(abs(x - y) / abs(y) for x, y in pairs):.1e}"


def pct(a, b):
    return f"{100 * a / b:.0f}%" if a is not None and b else "n/a"


def status_of(runs, name):
    r = runs.get(name)
    return "not run" if r is None else r.get("status", "not run")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="the measurements")
    run.add_argument("--bigbatch", required=True, help="the bigbatch binary")
    run.add_argument("--python", default="python3", help="the Python of bench/peer.py")
    run.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))))
    run.add_argument("--corpus", required=True, help="a text file or directory (fortunes)")
    run.add_argument("--work", required=True, help="run directories go here")
    run.add_argument("--deadline", type=float, required=True, help="Unix time to end by")
    run.add_argument("--log", required=True, help="the runs' output (appended)")
    run.add_argument("--json", required=True, help="the measurements (written)")
    run.add_argument("--ld-library-path", default="", help="prepended for bigbatch's runs")
    run.add_argument("--run-seconds", type=float, default=12.0,
                     help="seconds of windows per run when time allows")
    run.add_argument("--min-seconds", type=float, default=4.0,
                     help="a run that would get less is skipped")
    run.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    rep = sub.add_parser("report", help="results.json and results.md")
    rep.add_argument("--out", required=True)
    rep.add_argument("--work", required=True)
    rep.add_argument("--repo", default=".")
    rep.add_argument("--budget", type=int, default=480)
    rep.add_argument("--started", type=float, default=0.0)
    args = parser.parse_args()
    if args.command == "run":
        sys.exit(run_all(args))
    report(args)


if __name__ == "__main__":
    main()
