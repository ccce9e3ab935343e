"""Training, export and evaluation of fp4serve's default model (README.md)."""
