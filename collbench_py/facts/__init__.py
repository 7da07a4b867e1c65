"""What a node is: host facts (GPUs, NICs, drivers), its MPI and its toolchain for nccl-tests."""
