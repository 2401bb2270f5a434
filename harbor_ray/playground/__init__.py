"""The playground (`harbor-ray playground`): a page to browse the served datasets' tasks,
see what this machine can run, start rollouts and follow them."""

from harbor_ray.playground.app import Playground, build_playground_app
from harbor_ray.playground.serve import open_playground, serve_playground

__all__ = ["Playground", "build_playground_app", "open_playground", "serve_playground"]
