"""Trainers driving the online service: `harbor_ray.integrations.trl` (TRL's
GRPOTrainer) and `harbor_ray.integrations.skyrl` (SkyRL's generator). Each imports its
trainer's package only when imported itself."""
