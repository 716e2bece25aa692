"""Tooling for the mooncake-pd Helm chart."""
