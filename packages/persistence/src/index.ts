export * as Database from "./Database.js"
export * as EventIds from "./EventIds.js"
export * as Migrations from "./Migrations.js"
export * from "./ThreadStore.js"
