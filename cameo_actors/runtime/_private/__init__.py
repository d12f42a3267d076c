"""The runtime's internals: nothing here is API; import from `cameo_actors.runtime`."""
