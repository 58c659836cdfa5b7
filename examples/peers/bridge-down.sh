ip link del br0
ethtool -K d0 gro off
