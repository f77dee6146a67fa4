"""parasuite speech package."""
