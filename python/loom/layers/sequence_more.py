"""More sequence layers of Fluid 1.8."""

__all__ = []
