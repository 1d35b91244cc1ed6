# Sourced by the torchvision bench scripts: torchvision 0.21's ops CPU-only, the image and
# video decoders off (the header of ../shared/corpora/get-torchvision; setup.py's variables).
export MAX_JOBS=${MAX_JOBS:-2} FORCE_CUDA=0 TORCHVISION_USE_PNG=0 TORCHVISION_USE_JPEG=0 \
  TORCHVISION_USE_WEBP=0 TORCHVISION_USE_GIF=0 TORCHVISION_USE_NVJPEG=0 \
  TORCHVISION_USE_VIDEO_CODEC=0 TORCHVISION_USE_FFMPEG=0
if [ -d /usr/lib/ccache ]; then
  export PATH="/usr/lib/ccache:$PATH" CCACHE_NOHASHDIR=1
fi
