"""parasuite vision package."""
