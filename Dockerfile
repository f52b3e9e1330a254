# Bot Payment Service: one image for every role (api, worker, scheduler, tunnel).
FROM node:20-bookworm-slim

WORKDIR /app
ENV NODE_ENV=production \
    PORT=8080 \
    HOST=0.0.0.0 \
    DATA_DIR=/data

# Dependencies first, so the layer is reused while only sources change. bin/ comes with them:
# npm ci runs the package's postinstall script (bin/lock-optional.mjs).
COPY package.json package-lock.json ./
COPY packages/ ./packages/
COPY bin/ ./bin/
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

COPY src/ ./src/
COPY docs/skill.md ./docs/skill.md
# The compiled service (dist/, so that start-up imports JavaScript instead of compiling TypeScript)
# and the embedded database's template (initdb and migrations done once, here): npm ci above ran
# before the sources were copied, so it skipped both. Start-up only reads them.
RUN node bin/build.mjs && node bin/prepare-embedded.mjs

RUN mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
EXPOSE 8080

HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
  CMD node -e "fetch('http://127.0.0.1:'+process.env.PORT+'/readyz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"

# SIGTERM stops accepting, finishes in-flight requests, stops workers and closes the database.
STOPSIGNAL SIGTERM
CMD ["node", "bin/botpay.mjs", "serve"]
