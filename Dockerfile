# Bot Payment Service: one image for every role (api, worker, scheduler, tunnel).
FROM node:20-bookworm-slim

WORKDIR /app
ENV NODE_ENV=production \
    PORT=8080 \
    HOST=0.0.0.0 \
    DATA_DIR=/data

# Dependencies first, so the layer is reused while only sources change.
COPY package.json package-lock.json ./
COPY packages/ ./packages/
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

COPY bin/ ./bin/
COPY src/ ./src/
COPY docs/skill.md ./docs/skill.md

RUN mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
EXPOSE 8080

HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
  CMD node -e "fetch('http://127.0.0.1:'+process.env.PORT+'/readyz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"

# SIGTERM stops accepting, finishes in-flight requests, stops workers and closes the database.
STOPSIGNAL SIGTERM
CMD ["node", "bin/botpay.mjs", "serve"]
