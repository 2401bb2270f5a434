import asyncio

import httpx

from harbor_ray.cluster.admission import AdmissionController, AdmissionPolicy
from harbor_ray.cluster.gate import ResizableGate
from harbor_ray.cluster.metrics_poller import steer_gate

IDLE = "vllm:kv_cache_usage_perc 0.1\nvllm:num_requests_waiting 0\n"
BUSY = "vllm:kv_cache_usage_perc 0.5\nvllm:num_requests_waiting 9\n"


async def test_the_gate_follows_the_scripted_engines_and_a_silent_one_holds_it() -> None:
    script = [IDLE, IDLE, None, BUSY, BUSY]  # None: the engine does not answer
    seen: list[int] = []
    finished = asyncio.Event()

    def engine(request: httpx.Request) -> httpx.Response:
        assert request.url == "http://engine:8000/metrics"
        text = script.pop(0) if script else IDLE
        if not script:
            finished.set()
        return httpx.Response(503) if text is None else httpx.Response(200, text=text)

    gate = ResizableGate(4)
    for _ in range(4):
        await gate.acquire()  # the cap in use: idle engines may raise it
    steering = asyncio.create_task(
        steer_gate(
            gate,
            AdmissionController(AdmissionPolicy(floor=2, ceiling=6, start=4)),
            ["http://engine:8000/metrics"],
            every_s=0.001,
            on_limit=seen.append,
            transport=httpx.MockTransport(engine),
        )
    )
    await finished.wait()
    await asyncio.sleep(0.05)
    steering.cancel()
    # 4 held: the first rise uses the cap, the second would not (5 allowed); the
    # silent sample moves nothing; the queue cuts.
    assert seen[:4] == [5, 5, 4, 3]
    assert gate.limit == seen[-1]
