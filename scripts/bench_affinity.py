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

    .venv/bin/python scripts/bench_affinity.py [--replicas 4] [--sessions 64]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import random
import statistics
import sys
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harbor_ray.engine.affinity import SessionAffinity  # noqa: E402

ROUTERS = ("affinity", "round_robin", "load")


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
        took = (args.overhead_s + recomputed / args.prefill_tps
                + call.reply_tokens / args.decode_tps)
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


def session_key(session: int) -> str:
    return f"s{session}"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=64, help="sessions at once")
    parser.add_argument("--rollouts", type=int, default=256, help="sessions in all")
    parser.add_argument("--turns", type=int, default=20, help="calls per session")
    parser.add_argument("--system", type=int, default=2048,
                        help="tokens of the system prompt every session shares")
    parser.add_argument("--observation", type=int, default=512,
                        help="tokens of tool output each turn adds")
    parser.add_argument("--reply", type=int, default=128, help="tokens sampled per call")
    parser.add_argument("--block", type=int, default=16, help="tokens per cache block")
    parser.add_argument("--cache-blocks", type=int, default=8192,
                        help="blocks each replica's prefix cache holds")
    parser.add_argument("--prefill-tps", type=float, default=20_000,
                        help="prompt tokens a replica computes per second")
    parser.add_argument("--decode-tps", type=float, default=2_000,
                        help="tokens a replica samples per second")
    parser.add_argument("--overhead-s", type=float, default=0.01, help="fixed cost of a call")
    parser.add_argument("--tool-s", type=float, default=2.0,
                        help="mean time an agent's tool runs between calls")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.replicas < 2:
        parser.error("--replicas must be at least 2 (the load router draws two)")

    results = {router: run(args, router) for router in ROUTERS}
    print(f"{args.replicas} replicas x {args.cache_blocks} blocks of {args.block} tokens; "
          f"{args.sessions} sessions at once, {args.rollouts} in all, {args.turns} calls "
          f"each (modelled times)")
    print(f"{'router':<12} {'hit rate':>9} {'recomputed':>12} {'p50 s':>8} {'p99 s':>8} "
          f"{'rollouts/min':>13}")
    for router, r in results.items():
        print(f"{router:<12} {r.hit_rate:>9.3f} {r.recomputed:>12,} {r.latency(50):>8.3f} "
              f"{r.latency(99):>8.3f} {r.rollouts_per_min:>13.1f}")
    best = results["affinity"]
    for other in ROUTERS[1:]:
        r = results[other]
        print(f"affinity vs {other}: hit rate {ratio(best.hit_rate, r.hit_rate)}, "
              f"tokens recomputed {ratio(best.recomputed, r.recomputed)}, "
              f"p50 {ratio(best.latency(50), r.latency(50))}, "
              f"p99 {ratio(best.latency(99), r.latency(99))}, "
              f"rollouts/min {ratio(best.rollouts_per_min, r.rollouts_per_min)}")


if __name__ == "__main__":
    main()
