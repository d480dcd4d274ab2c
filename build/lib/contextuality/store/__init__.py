"""The stored vectors: HDF5 shards, virtual layer files, the manifest, checksummed reads, the classic export."""
