# Sourced by the bench scripts: a CPU-only build with a compiler cache.
export FORCE_CUDA=0 FORCE_ONLY_CPU=1 MAX_JOBS=${MAX_JOBS:-2}
if [ -d /usr/lib/ccache ]; then
  export PATH="/usr/lib/ccache:$PATH"   # Debian's ccache: gcc/g++/c++ through the cache
  export CCACHE_DIR=${CCACHE_DIR:-/work/ext/ccache}
  export CCACHE_NOHASHDIR=1   # with -g ccache hashes the directory: a cp -a of a tree would miss
fi
