package mmapfile

import "syscall"

const populate = syscall.MAP_POPULATE
