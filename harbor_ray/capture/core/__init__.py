"""The capture core: plain functions over plain records, with no Ray, no HTTP stack, no
Harbor and no clock (`harbor_ray.capture.CORE` lists its modules; a test holds it)."""
