from harbor_ray.cluster.engine_metrics import EngineLoad, parse_engine_metrics, vllm_name

# As vLLM 0.32's PrometheusStatLogger writes them (two engines of one server).
VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 12.0
vllm:num_requests_running{engine="1",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 99.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.91
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9
http_requests_total{handler="/metrics"} 5.0
"""

# Ray Serve LLM with log_engine_metrics: Ray's endpoint, names sanitized and prefixed.
RAY = """\
ray_vllm_num_requests_running{model_name="m",ReplicaId="a b"} 2.0
ray_vllm_num_requests_waiting{model_name="m",ReplicaId="a b"} 1.0
ray_vllm_gpu_cache_usage_perc{model_name="m"} 0.5
ray_vllm_num_preemptions_total{model_name="m"} 2.0
"""


def test_one_server_sums_counts_and_takes_the_fullest_cache() -> None:
    assert parse_engine_metrics([VLLM]) == EngineLoad(
        kv_cache_usage=0.91, running=15, waiting=4, preemptions=7.0
    )


def test_ray_serve_names_and_several_replicas_add_up() -> None:
    assert parse_engine_metrics([VLLM, RAY]) == EngineLoad(
        kv_cache_usage=0.91, running=17, waiting=5, preemptions=9.0
    )


def test_other_metrics_and_nothing_read_as_idle() -> None:
    assert parse_engine_metrics(["up 1\nbad line\nvllm:num_requests_waiting NaN\n"]) == EngineLoad()
    assert vllm_name("http_requests_total") is None
    assert vllm_name("vllm:num_preemptions_total") == "num_preemptions"
