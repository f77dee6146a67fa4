"""parasuite kernels package."""
