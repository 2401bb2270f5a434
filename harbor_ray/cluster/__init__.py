"""The Ray layer: one actor per rollout, the sweep driver that runs them, the reaper."""
