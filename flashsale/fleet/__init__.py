"""A fleet on one machine (docs/fleet.md): gateway hosts in network namespaces behind haproxy."""
