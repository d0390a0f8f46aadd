"""Fakes the tests share that the product does not ship (see the README's Testing section)."""
