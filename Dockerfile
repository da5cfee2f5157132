# sapiens2-ft serve in a container (docs/deploy.md#as-a-container). Built from the checkout:
#   docker build -t sapiens2-ft-serve .
#   docker run -p 8000:8000 -v "$PWD/my-model:/models/my-model:ro" sapiens2-ft-serve --model /models/my-model
# The torch pin is the project's; from PyPI on Linux it is the CUDA build (run with --gpus all). A CPU-only image:
# --build-arg PIP_ARGS="--index-url <PyTorch's CPU wheel index> --extra-index-url <PyPI>" (docs/install.md).
FROM python:3.11-slim

ARG TORCH="torch==2.13.0"
ARG PIP_ARGS=""
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

COPY . /src
RUN pip install $PIP_ARGS "$TORCH" "/src[serve,onnx]" \
    && rm -rf /src \
    && useradd --create-home --uid 1000 serve

USER serve
WORKDIR /home/serve
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=180s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4).status != 200)"]
ENTRYPOINT ["sapiens2-ft", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["--help"]
