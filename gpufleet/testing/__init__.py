"""Test helpers shipped with the package: builders of nodes, pods and clusters, and fakes."""
