# KL005: EXPOSE and a web UI's --listen/--port are serving evidence too.
# expect: KL005
FROM python:3.11-slim
RUN pip install --no-cache-dir gradio==4.44.1
EXPOSE 7860
CMD ["python", "webui.py", "--listen", "--port", "7860"]
