"""More losses of Fluid 1.8."""

__all__ = []
