"""Scripted agents' model replies, for a fake engine to play."""

from harbor_ray.qualify.script import terminus_script

__all__ = ["terminus_script"]
