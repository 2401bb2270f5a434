"""`python -m harbor_ray.cli`: the same as the `harbor-ray` script."""

from harbor_ray.cli import main

if __name__ == "__main__":  # importing the module (a walk of the package) runs nothing
    main()
