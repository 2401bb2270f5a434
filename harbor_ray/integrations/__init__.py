"""Trainers driving the online service: `harbor_ray.integrations.trl` (TRL's
GRPOTrainer). Each imports its trainer's package only when imported itself."""
