"""The design studies behind hopmem's defaults: outside the product and outside ``make test`` (README.md)."""
