"""The Ray layer: rollout hosts (several rollouts each, owning their capture sessions),
the sweep driver that runs them, the capture proxy deployment and its ingresses, the
reaper."""
