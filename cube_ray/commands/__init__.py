"""Subcommands of the ``cube-ray`` CLI, one module each (see ``cube_ray.cli``)."""
