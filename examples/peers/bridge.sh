# The Linux bridge over d0 and d1, set up as a two-port forwarder: no
# learning and no flooding, g1's MAC out of d1 by a static FDB entry, and
# bridge netfilter off (the kernel docs' advice for a bridge that filters
# nothing). GRO on d0 gives the veth the NAPI context that frames
# redirected in by the generator's XDP need. Run with `sh -e` in dut.
for f in /proc/sys/net/bridge/bridge-nf-call-*; do [ -e "$f" ] && echo 0 > "$f"; done
ip link add br0 type bridge
ip link set d0 master br0
ip link set d1 master br0
bridge link set dev d0 learning off flood off
bridge link set dev d1 learning off flood off
bridge fdb add 02:00:00:00:02:01 dev d1 master static
ip link set br0 up
ethtool -K d0 gro on
