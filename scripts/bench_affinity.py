"""Session-affine routing against round-robin and Serve's load-based choice, on a
modelled prefix cache at a scale one machine cannot run.

A discrete-event model, no engine: --replicas replicas, each a FIFO server whose prefix
cache holds --cache-blocks blocks of --block tokens (LRU, as vLLM's: a call reuses the
longest run of its prompt's leading blocks the replica holds, computes the rest, and
leaves all of them cached). --sessions agent sessions run at once; each makes --turns
calls whose prompt is a system prompt every session shares (--system tokens) followed
by its own history, growing by --observation tokens of tool output and --reply sampled
tokens per turn; between calls the agent's tool runs for an exponential time of mean
--tool-s. A finished session is replaced until --rollouts rollouts ran. A call costs
--overhead-s plus its recomputed tokens at --prefill-tps and its reply at --decode-tps.

The routers: `affinity` is harbor_ray.engine.affinity itself (the core of the engine's
router) with the replicas' queue lengths as loads; `round_robin` the next replica each
call; `load` Serve's default, the shorter queue of two replicas drawn at random.

It prints, per router, the prefix-cache hit rate (cached prompt tokens over prompt
tokens, as vLLM's prefix_cache_hits / prefix_cache_queries count them), the tokens
recomputed, the p50 and p99 latency of a call and rollouts per minute, then the ratios
of affinity to each other router, from one run. The times are modelled, not measured:
the ratios are the result. Figures: docs/performance.md.

`--real` measures the same on real engines instead: for each of `affinity` and `load`
(the two `routing:` values of the engine's config) the engine of --config
(serve_configs/engine_cpu.yaml, what `harbor-ray engine up` serves) is started on a
local Ray with `num_replicas: --replicas`, that routing, --cache-blocks KV blocks of
--block tokens a replica (vLLM's num_gpu_blocks_override and block_size) and
`enable_prompt_tokens_details`; the sessions are driven through the capture proxy's
engine client, each call carrying its session in `x-session-id` as the proxy sends it,
each prompt the last one, its reply and a new user message of --observation words;
then the engine is stopped. The hit rate is vLLM's own per-call count,
`usage.prompt_tokens_details.cached_tokens` over `usage.prompt_tokens`: the prefix
found when a call was first scheduled, so like vLLM's prefix_cache_queries/_hits it
leaves out what a preempted call computes again. Latencies and rollouts/min are
measured (wall clock, the machine's load printed with them). Run it alone:

    flock /tmp/engine.lock .venv/bin/python scripts/bench_affinity.py --real

    .venv/bin/python scripts/bench_affinity.py [--replicas 4] [--sessions 64]
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harbor_ray.engine.affinity import SessionAffinity  # noqa: E402

ROUTERS = ("affinity", "round_robin", "load")
REAL_ROUTERS = ("affinity", "load")
# Small enough for two CPU engines on two cores: 8 sessions x 6 calls whose prompts grow
# to ~1,300 tokens, 16-token replies; 48 blocks of 128 tokens (6,144 tokens) a replica
# hold the ~4 sessions affinity gives each replica, not the 8 the load router spreads
# over both.
REAL_DEFAULTS = {
    "replicas": 2,
    "sessions": 8,
    "rollouts": 8,
    "turns": 6,
    "system": 256,
    "observation": 150,
    "reply": 16,
    "block": 128,
    "cache_blocks": 48,
    "tool_s": 0.2,
}


@dataclass
class Call:
    session: int
    prompt: tuple[int, ...]  # block ids, leading blocks first
    reply_tokens: int
    issued: float


@dataclass
class Replica:
    name: str
    budget: int
    cache: OrderedDict[int, None] = field(default_factory=OrderedDict)
    queue: deque[Call] = field(default_factory=deque)
    busy: bool = False

    @property
    def load(self) -> int:
        return len(self.queue) + self.busy

    def serve(self, blocks: tuple[int, ...]) -> int:
        """Blocks of `blocks` found cached (the leading run), then all left cached."""
        hit = 0
        for block in blocks:
            if block not in self.cache:
                break
            hit += 1
        for block in blocks:
            self.cache[block] = None
            self.cache.move_to_end(block)
        while len(self.cache) > self.budget:
            self.cache.popitem(last=False)
        return hit


@dataclass
class Result:
    prompt_tokens: int = 0
    hit_tokens: int = 0
    latencies: list[float] = field(default_factory=list)
    finished: int = 0
    end: float = 0.0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens

    @property
    def recomputed(self) -> int:
        return self.prompt_tokens - self.hit_tokens

    def latency(self, q: float) -> float:
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[round(q) - 1]

    @property
    def rollouts_per_min(self) -> float:
        return 60 * self.finished / self.end


def run(args: argparse.Namespace, router: str) -> Result:
    rng = random.Random(args.seed)  # the same sessions and tool times for every router
    pick = random.Random(args.seed + 1)
    replicas = [Replica(f"r{i}", args.cache_blocks) for i in range(args.replicas)]
    affinity = SessionAffinity()
    turn_robin = itertools.cycle(replicas)
    blocks = itertools.count()
    system = tuple(next(blocks) for _ in range(args.system // args.block))
    history: dict[int, tuple[int, ...]] = {}
    turns_done: dict[int, int] = {}
    result = Result()
    events: list[tuple[float, int, str, int]] = []
    order = itertools.count()
    sessions = itertools.count()

    def schedule(at: float, kind: str, what: int) -> None:
        heapq.heappush(events, (at, next(order), kind, what))

    def start_session(now: float) -> None:
        session = next(sessions)
        history[session], turns_done[session] = (), 0
        schedule(now + rng.expovariate(1 / args.tool_s), "call", session)

    def choose(session: int, now: float) -> Replica:
        if router == "round_robin":
            return next(turn_robin)
        if router == "load":
            a, b = pick.sample(replicas, 2)
            return a if a.load <= b.load else b
        by_name = {r.name: r for r in replicas}
        first = affinity.choose(session_key(session), {r.name: r.load for r in replicas}, now)[0]
        return by_name[first]

    def begin(replica: Replica, now: float) -> None:
        call = replica.queue.popleft()
        replica.busy = True
        hit = replica.serve(call.prompt)
        result.prompt_tokens += len(call.prompt) * args.block
        result.hit_tokens += hit * args.block
        recomputed = (len(call.prompt) - hit) * args.block
        took = args.overhead_s + recomputed / args.prefill_tps + call.reply_tokens / args.decode_tps
        schedule(now + took, "done", replicas.index(replica))
        in_service[replica.name] = call

    in_service: dict[str, Call] = {}
    started = 0
    for _ in range(min(args.sessions, args.rollouts)):
        start_session(0.0)
        started += 1
    while events:
        now, _, kind, what = heapq.heappop(events)
        if kind == "call":
            session = what
            grown = (args.observation + (args.reply if turns_done[session] else 0)) // args.block
            history[session] += tuple(next(blocks) for _ in range(grown))
            call = Call(session, system + history[session], args.reply, now)
            replica = choose(session, now)
            replica.queue.append(call)
            if not replica.busy:
                begin(replica, now)
        else:
            replica = replicas[what]
            call = in_service.pop(replica.name)
            replica.busy = False
            result.latencies.append(now - call.issued)
            turns_done[call.session] += 1
            if turns_done[call.session] < args.turns:
                schedule(now + rng.expovariate(1 / args.tool_s), "call", call.session)
            else:
                result.finished += 1
                result.end = now
                if started < args.rollouts:
                    start_session(now)
                    started += 1
            if replica.queue:
                begin(replica, now)
    return result


# --real: the engine `harbor-ray engine up` serves, two replicas, measured.

# Words for the prompts: ~1 token each in SmolLM2's vocabulary, so --system and
# --observation are close to token counts (the engines' own counts are what is reported).
_WORD_TEXT = (
    "the a of to and in is it that for on with as was at by be this from or have "
    "not are but had which one all were when we there can an your their if has more "
    "will would been out so what up about into than them could its only other new "
    "some time these two may then do first any like my now over such our man me "
    "even most made after also did many before must through back years where much "
    "way well down should because each just those people how too little state good "
    "very make world still own see men work long get here between both life being "
    "under never day same another know while last might us great old year off come "
    "since against go came right used take three file test code line value error"
)
WORDS = _WORD_TEXT.split()


def run_real(args: argparse.Namespace, routers: list[str]) -> dict[str, Result]:
    """For each router: the engine of `args.config` started with `args.replicas` replicas
    routed by it, the sessions driven through it, the engine stopped. One local Ray."""
    import ray

    from harbor_ray.switches import set_switches

    set_switches()
    temp_dir = tempfile.mkdtemp(prefix="hr-bench-affinity-", dir="/tmp")
    ray.init(_temp_dir=temp_dir, include_dashboard=False, log_to_driver=False)
    try:
        return {router: real_router(args, router) for router in routers}
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def real_router(args: argparse.Namespace, router: str) -> Result:
    import yaml

    from harbor_ray.engine.lifecycle import engine_down, engine_up
    from tests.fixtures.fake_engine import free_port

    config = yaml.safe_load(args.config.read_text())
    config["http_options"]["port"] = free_port()
    [app] = config["applications"]
    app["args"].update(num_replicas=args.replicas, routing=router, max_model_len=args.max_model_len)
    app["args"]["engine_kwargs"] = {
        **app["args"].get("engine_kwargs", {}),
        # Each answer's usage.prompt_tokens_details.cached_tokens: the prompt tokens its
        # replica found in its prefix cache.
        "enable_prompt_tokens_details": True,
        "block_size": args.block,
        "num_gpu_blocks_override": args.cache_blocks,
        "enforce_eager": args.eager,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="bench-affinity-") as file:
        yaml.safe_dump(config, file)
        file.flush()
        print(f"== routing: {router}, {args.replicas} replicas", flush=True)
        started = time.perf_counter()
        handle = engine_up(Path(file.name), progress=lambda m: print(f"  {m}", flush=True))
    print(
        f"  {args.replicas} replicas up in {time.perf_counter() - started:.0f} s, "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    try:
        result = asyncio.run(drive(handle.url, handle.model_id, args))
    finally:
        engine_down(handle.app_name)
    print(
        f"  {result.finished} rollouts in {result.end:.1f} s, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return result


async def drive(url: str, model: str, args: argparse.Namespace) -> Result:
    """`args.rollouts` sessions, `args.sessions` at once, through the capture proxy's
    engine client with each call's session in `x-session-id`, as the proxy sends it:
    each call's prompt is the last one's, its reply and a new user message."""
    from harbor_ray.capture.proxy.upstream import HttpEngine

    engine = HttpEngine(url)
    result = Result()
    system = " ".join(random.Random(args.seed).choices(WORDS, k=args.system))
    slots = asyncio.Semaphore(args.sessions)

    async def session(index: int) -> None:
        rng = random.Random(args.seed * 1_000_003 + index)  # the same for every router
        messages = [{"role": "system", "content": system}]
        async with slots:
            for turn in range(args.turns):
                if turn:
                    await asyncio.sleep(rng.expovariate(1 / args.tool_s))
                messages.append(
                    {"role": "user", "content": " ".join(rng.choices(WORDS, k=args.observation))}
                )
                sent = time.perf_counter()
                reply = await engine.request(
                    "POST",
                    "/v1/chat/completions",
                    {
                        "model": model,
                        "messages": messages,
                        "max_tokens": args.reply,
                        "temperature": 0,
                    },
                    session=session_key(index),
                )
                result.latencies.append(time.perf_counter() - sent)
                usage = reply["usage"]
                result.prompt_tokens += usage["prompt_tokens"]
                result.hit_tokens += usage["prompt_tokens_details"]["cached_tokens"]
                messages.append(
                    {
                        "role": "assistant",
                        "content": reply["choices"][0]["message"]["content"] or "",
                    }
                )
            result.finished += 1

    started = time.perf_counter()
    try:
        await asyncio.gather(*(session(i) for i in range(args.rollouts)))
    finally:
        await engine.aclose()
    result.end = time.perf_counter() - started
    return result


def session_key(session: int) -> str:
    return f"s{session}"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--real",
        action="store_true",
        help="measure real engines instead of the model (see the module's "
        "docstring); the flags below then take REAL_DEFAULTS",
    )
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=64, help="sessions at once")
    parser.add_argument("--rollouts", type=int, default=256, help="sessions in all")
    parser.add_argument("--turns", type=int, default=20, help="calls per session")
    parser.add_argument(
        "--system",
        type=int,
        default=2048,
        help="tokens of the system prompt every session shares (--real: words)",
    )
    parser.add_argument(
        "--observation",
        type=int,
        default=512,
        help="tokens of tool output each turn adds (--real: words)",
    )
    parser.add_argument("--reply", type=int, default=128, help="tokens sampled per call")
    parser.add_argument(
        "--block", type=int, default=16, help="tokens per cache block (--real: vLLM's block_size)"
    )
    parser.add_argument(
        "--cache-blocks",
        type=int,
        default=8192,
        help="blocks each replica's prefix cache holds (--real: vLLM's num_gpu_blocks_override)",
    )
    parser.add_argument(
        "--prefill-tps",
        type=float,
        default=20_000,
        help="prompt tokens a replica computes per second (model only)",
    )
    parser.add_argument(
        "--decode-tps",
        type=float,
        default=2_000,
        help="tokens a replica samples per second (model only)",
    )
    parser.add_argument(
        "--overhead-s", type=float, default=0.01, help="fixed cost of a call (model only)"
    )
    parser.add_argument(
        "--tool-s", type=float, default=2.0, help="mean time an agent's tool runs between calls"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--config",
        type=Path,
        default=ROOT / "serve_configs/engine_cpu.yaml",
        help="--real: the engine's Serve YAML (its args are kept; the "
        "replicas, routing, KV cache and context are set from the flags)",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=2048,
        help="--real: the engines' context (prompt + reply must fit)",
    )
    parser.add_argument(
        "--eager",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--real: vLLM without torch.compile (starts in seconds instead "
        "of compiling; both routers pay the same)",
    )
    parser.add_argument(
        "--routers",
        nargs="+",
        choices=ROUTERS,
        default=None,
        help="routers to compare, affinity first (default: all three; "
        "--real: affinity and load, the two an engine config selects)",
    )
    args = parser.parse_args(argv)
    if args.real:
        parser.set_defaults(**REAL_DEFAULTS)
        args = parser.parse_args(argv)
    routers = args.routers or (REAL_ROUTERS if args.real else ROUTERS)
    if args.replicas < 2:
        parser.error("--replicas must be at least 2 (the load router draws two)")
    if routers[0] != "affinity" or len(routers) < 2:
        parser.error("--routers: affinity first, then at least one to compare it with")
    if args.real:
        if "round_robin" in routers:
            parser.error("--real: an engine config selects affinity or load only")
        results = run_real(args, routers)
        kind, how = "real replicas", f"measured; load {os.getloadavg()[0]:.1f}"
    else:
        results = {router: run(args, router) for router in routers}
        kind, how = "replicas", "modelled times"
    report(
        f"{args.replicas} {kind} x {args.cache_blocks} blocks of {args.block} tokens; "
        f"{args.sessions} sessions at once, {args.rollouts} in all, {args.turns} calls "
        f"each ({how})",
        results,
    )


def report(what: str, results: dict[str, Result]) -> None:
    """The table of `results` (affinity first), then affinity's ratios to each other."""
    print(what)
    print(
        f"{'router':<12} {'hit rate':>9} {'recomputed':>12} {'p50 s':>8} {'p99 s':>8} "
        f"{'rollouts/min':>13}"
    )
    for router, r in results.items():
        print(
            f"{router:<12} {r.hit_rate:>9.3f} {r.recomputed:>12,} {r.latency(50):>8.3f} "
            f"{r.latency(99):>8.3f} {r.rollouts_per_min:>13.1f}"
        )
    best = results["affinity"]
    for other, r in results.items():
        if other == "affinity":
            continue
        print(
            f"affinity vs {other}: hit rate {ratio(best.hit_rate, r.hit_rate)}, "
            f"tokens recomputed {ratio(best.recomputed, r.recomputed)}, "
            f"p50 {ratio(best.latency(50), r.latency(50))}, "
            f"p99 {ratio(best.latency(99), r.latency(99))}, "
            f"rollouts/min {ratio(best.rollouts_per_min, r.rollouts_per_min)}"
        )


if __name__ == "__main__":
    main()
