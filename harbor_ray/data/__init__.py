"""harbor_ray's dataset: rollouts/, sequences/ and turns/ as Parquet (see SCHEMA.md).

Every rollout ends as one `RolloutResult` (`result`, with the closed `ErrorType`), the
row that both the trial layer fills and the encoding writes.

Writing (`DatasetWriter`, `encode_record`) is pure Arrow and Parquet; the Ray Data
readers import Ray Data only when called.
"""

from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.data.readers import read_rollouts, read_sequences, read_turns
from harbor_ray.data.rebuild import rebuild_prompts, turn_records
from harbor_ray.data.schema import SCHEMA_VERSION
from harbor_ray.data.trl import call_records, rollout_samples
from harbor_ray.data.writer import DatasetWriter

__all__ = [
    "SCHEMA_VERSION",
    "DatasetWriter",
    "RolloutRecord",
    "call_records",
    "encode_record",
    "read_rollouts",
    "read_sequences",
    "read_turns",
    "rebuild_prompts",
    "rollout_samples",
    "turn_records",
]
