# The EFA / NCCL environment of a dptrain job across nodes, sourced by multi-node.sbatch and
# elastic.sbatch (EFA_RDMA: 1, the default, for GPUDirect RDMA over EFA, which p4d and p5 have; 0
# for other EFA types). aws-ofi-nccl's documentation lists these; srun and mpirun pass the
# environment on to every rank.
EFA_RDMA=${EFA_RDMA:-1}
# Let NCCL find the aws-ofi-nccl network plugin and the libfabric that the EFA installer put in
# /opt/amazon (the plugin sits in lib/ or, on Ubuntu, lib/x86_64-linux-gnu/).
export LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib:/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu:/opt/amazon/efa/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# libfabric offers only its EFA provider, so the plugin cannot settle for its TCP provider.
export FI_PROVIDER=efa
# GPUDirect RDMA over EFA: the NICs read and write GPU memory directly. aws-ofi-nccl >= 1.7 with
# libfabric >= 1.18 turns it on by itself on p4d/p5; setting it is harmless there and required
# with older releases. Instance types whose EFA lacks RDMA must not set it (EFA_RDMA=0).
if [ "$EFA_RDMA" = 1 ]; then export FI_EFA_USE_DEVICE_RDMA=1; fi
# NCCL must use the plugin's network or fail at start-up: without NCCL_NET, a plugin that does
# not load makes NCCL fall back to TCP sockets silently, several times slower. aws-ofi-nccl up to
# 1.11 names its network "AWS Libfabric"; later releases call it "Libfabric" but still answer to
# the old name when NCCL_NET asks for it, so this value works with either.
export NCCL_NET="AWS Libfabric"
# Warnings and errors only (NCCL_DEBUG=INFO, for debugging, names the network NCCL chose:
# "NET/AWS Libfabric" when the plugin is in use).
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# HDF5 tools (h5dump, h5py) lock files on open, which fails on a Lustre client mounted without
# flock; dptrain itself opens shards and checkpoints read-only without a lock.
export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}
# NCCL's bootstrap (and, without the plugin, its socket transport) runs over TCP on the primary
# ENA interface: any interface but loopback and container bridges.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker,veth}
