export * as Database from "./Database.js"
export * as Migrations from "./Migrations.js"
export * from "./ThreadStore.js"
export * from "./UnitOfWork.js"
