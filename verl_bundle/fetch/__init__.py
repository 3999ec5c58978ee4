"""The fetch stage: every locked file into the cache with its hash, pure sdists built here, every wheel checked; net/ is the network."""
