"""A fleet on one machine (issue 14): gateway hosts in network namespaces behind haproxy."""
