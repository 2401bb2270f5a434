"""The online rollout service: a controller a trainer drives over HTTP (groups of
rollouts in, finished groups out, weight updates, policy versions), on the cluster layer."""
